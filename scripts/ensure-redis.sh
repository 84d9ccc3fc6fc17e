#!/usr/bin/env bash
# Makes sure the Redis the tests use answers on 127.0.0.1:6379: starts a
# local redis-server there if none answers and the binary exists, and
# otherwise stops with a message saying how to install it.
set -euo pipefail

ping() {
	if command -v redis-cli >/dev/null 2>&1; then
		[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null || true)" = "PONG" ]
	else
		# No redis-cli: speak RESP with bash's /dev/tcp.
		exec 3<>/dev/tcp/127.0.0.1/6379 2>/dev/null || return 1
		printf 'PING\r\n' >&3
		local reply
		read -r -t 2 reply <&3 || true
		exec 3>&-
		[[ "$reply" == +PONG* ]]
	fi
}

if ping; then
	echo "ensure-redis: Redis answers on 127.0.0.1:6379"
	exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
	cat >&2 <<'MSG'
ensure-redis: no Redis answers on 127.0.0.1:6379 and redis-server is not installed.
The tests need a real Redis (and redis-server itself, to start private instances
and a 3-master Redis Cluster). Install it, then run the tests again:
    Debian/Ubuntu:  sudo apt-get install -y redis-server
    macOS:          brew install redis
MSG
	exit 1
fi

echo "ensure-redis: starting redis-server on 127.0.0.1:6379"
redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
	--dir "${TMPDIR:-/tmp}" --logfile "${TMPDIR:-/tmp}/smsgw-test-redis.log"
for _ in $(seq 1 50); do
	if ping; then
		echo "ensure-redis: Redis is up"
		exit 0
	fi
	sleep 0.1
done
echo "ensure-redis: redis-server did not answer within 5 s; see ${TMPDIR:-/tmp}/smsgw-test-redis.log" >&2
exit 1
