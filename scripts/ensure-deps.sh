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
#
# What is missing is installed with apt-get when this runs as root on a
# machine with apt-get; otherwise it stops and prints the exact command.
# SMSGW_DEPS_PATH, when set, replaces PATH for the checks (to try the
# script as on a machine without the tools; installing then still happens).
set -euo pipefail

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

want=("$@")
[ "${#want[@]}" -gt 0 ] || want=(redis chromium promtool)
missing=()
for w in "${want[@]}"; do
	case $w in
	redis | chromium | promtool) mapfile -t -O "${#missing[@]}" missing < <("need_$w") ;;
	*) echo "ensure-deps: unknown dependency '$w' (known: redis chromium promtool)" >&2; exit 2 ;;
	esac
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
