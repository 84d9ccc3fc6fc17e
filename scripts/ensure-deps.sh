#!/usr/bin/env bash
# ensure-deps: makes sure what the tests need is on this machine, and that
# Redis answers on 127.0.0.1:6379.
#
#   bash scripts/ensure-deps.sh redis chromium promtool   (any of them)
#
#   redis     redis-server and redis-cli (Debian packages redis-server,
#             redis-tools); then a Redis on 127.0.0.1:6379, started here
#             (no persistence, for tests) when none answers
#   chromium  a Chromium for the dashboard's browser test (package chromium;
#             SMSGW_SKIP_BROWSER=1 skips that test and this check)
#   promtool  Prometheus's promtool for the alert rules (package prometheus)
#   helm      Helm for the chart's render tests and make helm-check: no
#             Debian package, so it is built from its Go module (a few
#             minutes, once) into ${TMPDIR:-/tmp}/smsgw-helm-<version>/helm,
#             where the tests look for it; HELM=/path/to/helm skips the build
#
# What is missing is installed with apt-get when this runs as root on a
# machine with apt-get; otherwise it stops and prints the exact command.
# SMSGW_DEPS_PATH, when set, replaces PATH for the checks (to try the
# script as on a machine without the tools; installing then still happens).
set -euo pipefail
# go.mod's toolchain (for building helm), fetched from the module proxy when the installed go is older.
export GOTOOLCHAIN=go1.27.3

lookup_path=${SMSGW_DEPS_PATH:-$PATH}
have() { PATH=$lookup_path command -v "$1" >/dev/null 2>&1; }

# need_<name> prints the Debian packages still missing for <name>.
need_redis() {
	have redis-server || echo redis-server
	have redis-cli || echo redis-tools
}
need_chromium() {
	[ "${SMSGW_SKIP_BROWSER:-}" = 1 ] && return
	# The names the browser test looks for.
	for b in chromium chromium-browser google-chrome google-chrome-stable chrome headless-shell; do
		have "$b" && return
	done
	echo chromium
}
need_promtool() { have promtool || echo prometheus; }

# HELM_VERSION is the Helm the chart is checked with (deploy/chart_test.go
# names the same).
HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELM_CACHE=${TMPDIR:-/tmp}/smsgw-helm-$HELM_VERSION

want=("$@")
[ "${#want[@]}" -gt 0 ] || want=(redis chromium promtool helm)
missing=()
for w in "${want[@]}"; do
	case $w in
	redis | chromium | promtool) mapfile -t -O "${#missing[@]}" missing < <("need_$w") ;;
	helm) ;;
	*) echo "ensure-deps: unknown dependency '$w' (known: redis chromium promtool helm)" >&2; exit 2 ;;
	esac
done

for w in "${want[@]}"; do
	[ "$w" = helm ] || continue
	# The line "ensure-deps: helm at PATH" names the helm to use
	# (scripts/helm-check.sh reads it).
	if [ -n "${HELM:-}" ] && [ -x "$HELM" ]; then
		echo "ensure-deps: helm at $HELM"
		continue
	fi
	if [ ! -x "$HELM_CACHE/helm" ]; then
		echo "ensure-deps: building helm $HELM_VERSION into $HELM_CACHE (first run only; a few minutes)" >&2
		mkdir -p "$HELM_CACHE"
		# Outside the module, so that its go.mod is neither read nor changed.
		(cd "$HELM_CACHE" && GOFLAGS=-mod=mod GOBIN="$HELM_CACHE" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
	fi
	echo "ensure-deps: helm at $HELM_CACHE/helm"
done

if [ "${#missing[@]}" -gt 0 ]; then
	cmd="apt-get install -y --no-install-recommends ${missing[*]}"
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		cat >&2 <<MSG
ensure-deps: missing Debian packages: ${missing[*]}
Install them, then run the tests again:
    sudo apt-get update && sudo $cmd
(Elsewhere: redis-server and redis-cli, Chromium, and Prometheus's promtool on PATH.)
MSG
		exit 1
	fi
	echo "ensure-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086 # the package list is meant to split
	apt-get install -y -qq --no-install-recommends ${missing[*]} >/dev/null
	lookup_path=$PATH
	for w in "${want[@]}"; do
		[ "$w" = helm ] && continue # built above, not a Debian package
		if [ -n "$("need_$w")" ]; then
			echo "ensure-deps: $w still missing after: $cmd" >&2
			exit 1
		fi
	done
	echo "ensure-deps: installed ${missing[*]}"
fi

for w in "${want[@]}"; do
	[ "$w" = redis ] || continue
	# Redis answers, or is started here: the tests use 127.0.0.1:6379.
	ping() {
		[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null || true)" = "PONG" ]
	}
	if ping; then
		echo "ensure-deps: Redis answers on 127.0.0.1:6379"
		continue
	fi
	echo "ensure-deps: starting redis-server on 127.0.0.1:6379"
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
		--dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/smsgw-test-redis.log"
	for _ in $(seq 1 50); do
		ping && { echo "ensure-deps: Redis is up"; continue 2; }
		sleep 0.1
	done
	echo "ensure-deps: redis-server did not answer within 5 s; see ${TMPDIR:-/tmp}/smsgw-test-redis.log" >&2
	exit 1
done
echo "ensure-deps: ${want[*]}: ok"
