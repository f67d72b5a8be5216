#!/usr/bin/env bash
# Why the event store has no NOTIFY trigger: single-row inserts into an
# events-like table with and without an AFTER INSERT trigger that calls
# pg_notify, alternating rounds at the same client count. A NOTIFY in the
# inserting transaction takes a database-wide lock held until its commit is
# flushed, so every insert queues behind the previous commit.
#
#   deploy/scripts/bench/notify.sh          # 3 rounds of 5 s each, 8 clients
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$ROOT/deploy/scripts/bench/lib.sh"
SECONDS_EACH="${BENCH_SECONDS:-5}"
ROUNDS="${BENCH_ROUNDS:-3}"
CLIENTS="${BENCH_CLIENTS:-8}"
DB="cfgd_notify_scratch_$$"
trap drop_scratch EXIT
scratch_db "$DB"
run_psql() { psql -h "$PGHOST" -U "$PGUSER" -d "$DB" -qAtc "$1" >/dev/null; }
run_psql "CREATE TABLE plain (position bigserial PRIMARY KEY, stream text NOT NULL, data jsonb NOT NULL);
          CREATE TABLE notified (LIKE plain INCLUDING ALL);
          CREATE FUNCTION wake() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN PERFORM pg_notify('events', ''); RETURN NULL; END \$\$;
          CREATE TRIGGER wake AFTER INSERT ON notified FOR EACH STATEMENT EXECUTE FUNCTION wake();"
script() {
	local f
	f="$(mktemp)"
	echo "INSERT INTO $1 (stream, data) VALUES ('s-' || :client_id, '{\"k\": 1}');" >"$f"
	echo "$f"
}
PLAIN="$(script plain)" NOTIFIED="$(script notified)"
for r in $(seq "$ROUNDS"); do
	A="$(pgbench -h "$PGHOST" -U "$PGUSER" -n -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -f "$PLAIN" "$DB" 2>&1 | awk '/^tps = / {print $3; exit}')"
	B="$(pgbench -h "$PGHOST" -U "$PGUSER" -n -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -f "$NOTIFIED" "$DB" 2>&1 | awk '/^tps = / {print $3; exit}')"
	[ -n "$A" ] && [ -n "$B" ] || { echo "pgbench failed" >&2; exit 1; }
	awk -v r="$r" -v c="$CLIENTS" -v a="$A" -v b="$B" 'BEGIN {
		printf "round %d, %d clients: inserts/s without trigger %8.1f, with NOTIFY trigger %8.1f = %.2fx\n", r, c, a, b, b / a }'
done
rm -f "$PLAIN" "$NOTIFIED"
