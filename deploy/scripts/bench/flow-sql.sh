#!/usr/bin/env bash
# The database-only ceiling of an OTP sign-in: the flow's own statements
# (deploy/scripts/bench/flow.sql) replayed by pgbench's C client, next to pgbench -N,
# alternating rounds at the same client count. No HTTP, Go, SMTP, Redis,
# Kafka or projections: whatever the full flow reaches (deploy/scripts/bench/otp.sh)
# is below this.
#
#   deploy/scripts/bench/flow-sql.sh          # 3 rounds of 5 s each, 8 clients
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$ROOT/deploy/scripts/bench/lib.sh"
SECONDS_EACH="${BENCH_SECONDS:-5}"
ROUNDS="${BENCH_ROUNDS:-3}"
CLIENTS="${BENCH_CLIENTS:-8}"
PGB_DB="cfgd_pgbench_scratch_$$"
FLOW_DB="cfgd_flowsql_scratch_$$"
trap drop_scratch EXIT

pgbench_db "$PGB_DB"
scratch_db "$FLOW_DB"
(cd "$ROOT" && POSTGRES__URL="postgres:///$FLOW_DB?host=$PGHOST&user=$PGUSER" LOG__LEVEL=error go run ./cmd/cfgd migrate)

for r in $(seq "$ROUNDS"); do
	TPS="$(pgbench -h "$PGHOST" -U "$PGUSER" -N -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" "$PGB_DB" 2>&1 | awk '/^tps = / {print $3; exit}')"
	FLOWS="$(pgbench -h "$PGHOST" -U "$PGUSER" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -f "$ROOT/deploy/scripts/bench/flow.sql" "$FLOW_DB" 2>&1 | awk '/^tps = / {print $3; exit}')"
	[ -n "$TPS" ] && [ -n "$FLOWS" ] || { echo "pgbench failed" >&2; exit 1; }
	awk -v r="$r" -v c="$CLIENTS" -v t="$TPS" -v f="$FLOWS" 'BEGIN {
		printf "round %d, %d clients: pgbench -N %8.1f tps, flow statements %8.1f flows/s = %.3f flows per tps\n", r, c, t, f, f / t }'
done
