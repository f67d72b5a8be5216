#!/usr/bin/env bash
# Local stack for cfgd: Postgres 15, ClickHouse and Redis from Debian packages,
# each on loopback with its data under $CFGD_DATA_DIR (default ./data).
#
#   deploy/scripts/local/stack.sh up       install what is missing, start what is not running
#   deploy/scripts/local/stack.sh down     stop everything this script started
#   deploy/scripts/local/stack.sh status   one line per component
#
# Every step is idempotent: a second `up` is a no-op, and a pid file left by a
# crashed server is detected and replaced.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DATA="$(mkdir -p "${CFGD_DATA_DIR:-$ROOT/data}" && cd "${CFGD_DATA_DIR:-$ROOT/data}" && pwd)"
# A go.mod of its own keeps the data directory out of ./... patterns: the
# go tool would otherwise walk the database files while servers rewrite them.
[ -f "$DATA/go.mod" ] || printf 'module cfgd.invalid/data\n' >"$DATA/go.mod"
PG_PORT="${CFGD_PG_PORT:-5432}"
PG_SOCK=/var/run/postgresql
CH_TCP_PORT="${CFGD_CH_PORT:-9000}"
CH_HTTP_PORT="${CFGD_CH_HTTP_PORT:-8123}"
REDIS_PORT="${CFGD_REDIS_PORT:-6379}"
# shellcheck source=../lib/clickhouse.sh
. "$ROOT/deploy/scripts/lib/clickhouse.sh"

log() { printf 'stack: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_packages() {
	local missing=()
	[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
	command -v clickhouse-server >/dev/null || [ -x /usr/sbin/clickhouse-server ] || missing+=(clickhouse-server clickhouse-client)
	command -v redis-server >/dev/null || missing+=(redis-server)
	# protoc: make proto, and the tests that compile the served proto files.
	command -v protoc >/dev/null || missing+=(protobuf-compiler)
	# The well-known types (google/protobuf/timestamp.proto) the served proto
	# files import: only a recommendation of protobuf-compiler, which
	# --no-install-recommends leaves out.
	[ -f /usr/include/google/protobuf/timestamp.proto ] || missing+=(libprotobuf-dev)
	# chromium: the browser tests of the pages for people (chromedp).
	command -v chromium >/dev/null || missing+=(chromium)
	if [ "${#missing[@]}" -gt 0 ]; then
		log "installing ${missing[*]} (apt-get)"
		as_root apt-get update -qq
		DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # name port seconds
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		port_open "$2" && return 0
		sleep 0.1
	done
	die "$1 did not open 127.0.0.1:$2 within $3s (see $DATA/$1.log)"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }

# --- Postgres -------------------------------------------------------------
PGBIN=/usr/lib/postgresql/15/bin
pg_up() {
	local dir="$DATA/postgres"
	as_root install -d -o postgres -g postgres -m 0700 "$dir"
	as_root install -d -o postgres -g postgres -m 2775 "$PG_SOCK"
	if [ ! -f "$dir/PG_VERSION" ]; then
		log "postgres: initdb in $dir"
		as_root runuser -u postgres -- "$PGBIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
	fi
	if as_root runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
		log "postgres: already running on 127.0.0.1:$PG_PORT"
	else
		if port_open "$PG_PORT"; then
			# Another Postgres (a previous checkout's, or the system one) already
			# serves this port: use it if we can reach it as postgres.
			as_root runuser -u postgres -- psql -h "$PG_SOCK" -p "$PG_PORT" -tAc "select 1" >/dev/null 2>&1 ||
				die "postgres: port $PG_PORT is taken by a server we cannot use (stop it, or set CFGD_PG_PORT)"
			log "postgres: using the server already on 127.0.0.1:$PG_PORT"
			pg_ensure_db
			return
		fi
		# pg_ctl itself handles a stale postmaster.pid whose process is gone.
		as_root touch "$DATA/postgres.log" && as_root chown postgres "$DATA/postgres.log"
		as_root runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir" -l "$DATA/postgres.log" -w -t 60 \
			-o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=${CFGD_PG_FSYNC:-on}" start >/dev/null
		log "postgres: started on 127.0.0.1:$PG_PORT (socket $PG_SOCK)"
	fi
	pg_ensure_db
}
pg_ensure_db() {
	if ! as_root runuser -u postgres -- psql -h "$PG_SOCK" -p "$PG_PORT" -tAc "select 1 from pg_database where datname='cfgd'" | grep -q 1; then
		as_root runuser -u postgres -- createdb -h "$PG_SOCK" -p "$PG_PORT" cfgd
		log "postgres: created database cfgd"
	fi
}
pg_down() {
	local dir="$DATA/postgres"
	[ -f "$dir/PG_VERSION" ] || return 0
	as_root runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir" -m fast stop >/dev/null 2>&1 && log "postgres: stopped" || true
}

# --- ClickHouse -----------------------------------------------------------
ch_config() {
	local dir="$DATA/clickhouse"
	mkdir -p "$dir"
	cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$DATA/clickhouse.log</log><errorlog>$DATA/clickhouse.err.log</errorlog></logger>
    <http_port>$CH_HTTP_PORT</http_port>
    <tcp_port>$CH_TCP_PORT</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <max_connections>512</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>1073741824</mark_cache_size>
$(ch_paths "$dir")
</yandex>
XML
	ch_users "$dir" 4000000000 random
}
ch_up() {
	local pidf="$DATA/clickhouse.pid"
	if pid_alive "$pidf" && port_open "$CH_TCP_PORT"; then
		log "clickhouse: already running on 127.0.0.1:$CH_TCP_PORT"
		return
	fi
	if [ -f "$pidf" ] && ! pid_alive "$pidf"; then log "clickhouse: removing stale pid file"; rm -f "$pidf"; fi
	if port_open "$CH_TCP_PORT"; then
		clickhouse-client --port "$CH_TCP_PORT" --query "SELECT 1" >/dev/null 2>&1 ||
			die "clickhouse: port $CH_TCP_PORT is taken by a server we cannot use (stop it, or set CFGD_CH_PORT)"
		log "clickhouse: using the server already on 127.0.0.1:$CH_TCP_PORT"
		return
	fi
	ch_config
	"$(ch_bin)" --config-file="$DATA/clickhouse/config.xml" --pid-file="$pidf" --daemon >>"$DATA/clickhouse.log" 2>&1
	wait_port clickhouse "$CH_TCP_PORT" 60
	log "clickhouse: started on 127.0.0.1:$CH_TCP_PORT"
}
ch_down() {
	local pidf="$DATA/clickhouse.pid"
	pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
	kill "$(head -n1 "$pidf")"
	for _ in $(seq 1 100); do pid_alive "$pidf" || break; sleep 0.1; done
	rm -f "$pidf"
	log "clickhouse: stopped"
}

# --- Redis ----------------------------------------------------------------
redis_up() {
	local pidf="$DATA/redis.pid"
	if pid_alive "$pidf" && port_open "$REDIS_PORT"; then
		log "redis: already running on 127.0.0.1:$REDIS_PORT"
		return
	fi
	if [ -f "$pidf" ] && ! pid_alive "$pidf"; then log "redis: removing stale pid file"; rm -f "$pidf"; fi
	if port_open "$REDIS_PORT"; then
		[ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] ||
			die "redis: port $REDIS_PORT is taken by a server we cannot use (stop it, or set CFGD_REDIS_PORT)"
		log "redis: using the server already on 127.0.0.1:$REDIS_PORT"
		return
	fi
	mkdir -p "$DATA/redis"
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DATA/redis" --daemonize yes \
		--pidfile "$pidf" --logfile "$DATA/redis.log" --appendonly yes --save "" >/dev/null
	wait_port redis "$REDIS_PORT" 30
	log "redis: started on 127.0.0.1:$REDIS_PORT"
}
redis_down() {
	local pidf="$DATA/redis.pid"
	pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
	kill "$(head -n1 "$pidf")"
	for _ in $(seq 1 100); do pid_alive "$pidf" || break; sleep 0.1; done
	log "redis: stopped"
}

status() {
	local name port
	for pair in "postgres:$PG_PORT" "clickhouse:$CH_TCP_PORT" "redis:$REDIS_PORT"; do
		name=${pair%%:*} port=${pair##*:}
		if port_open "$port"; then echo "$name up 127.0.0.1:$port"; else echo "$name down"; fi
	done
}

case "${1:-up}" in
up)
	ensure_packages
	pg_up
	ch_up
	redis_up
	;;
down)
	redis_down
	ch_down
	pg_down
	;;
status) status ;;
*) die "usage: $0 up|down|status" ;;
esac
