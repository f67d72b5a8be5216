#!/usr/bin/env bash
# OTP sign-in throughput next to pgbench on the same machine, in one run.
#
#   deploy/bench/otp.sh            # 10 s of pgbench -N -c 8, then 10 s of BenchmarkOTPFlow
#   BENCH_SECONDS=30 deploy/bench/otp.sh
#
# pgbench runs against a scratch database on the local Postgres (created and
# dropped here); the Go benchmark starts the whole sign-in stack (HTTP,
# commands, event store, relay, embedded Kafka, projections, Redis, an
# in-process SMTP server) and runs request+verify flows with 8 clients.
# Target: flows/s >= 0.3 x pgbench tps, and a flow's p99 under 50 ms.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PGHOST="${PGHOST:-/var/run/postgresql}"
PGUSER="${PGUSER:-postgres}"
SECONDS_EACH="${BENCH_SECONDS:-10}"
DB="cfgd_pgbench_scratch_$$"

psql_admin() { psql -h "$PGHOST" -U "$PGUSER" -d postgres -qAtc "$1" >/dev/null; }
cleanup() { psql_admin "DROP DATABASE IF EXISTS $DB" || true; }
trap cleanup EXIT

echo "pgbench: initialising scratch database $DB" >&2
psql_admin "CREATE DATABASE $DB"
pgbench -h "$PGHOST" -U "$PGUSER" -i -q "$DB" >/dev/null 2>&1
echo "pgbench: -N -c 8 -T $SECONDS_EACH" >&2
PGB_OUT="$(pgbench -h "$PGHOST" -U "$PGUSER" -N -c 8 -T "$SECONDS_EACH" "$DB" 2>&1)"
TPS="$(awk '/^tps = / {print $3; exit}' <<<"$PGB_OUT")"
PGB_LAT="$(awk '/^latency average = / {print $4; exit}' <<<"$PGB_OUT")"
[ -n "$TPS" ] || { echo "pgbench gave no tps:" >&2; echo "$PGB_OUT" >&2; exit 1; }

echo "go: BenchmarkOTPFlow for ${SECONDS_EACH}s" >&2
GO_OUT="$(cd "$ROOT" && go test -run '^$' -bench '^BenchmarkOTPFlow$' -benchtime "${SECONDS_EACH}s" -count 1 ./api/auth/ 2>&1)"
LINE="$(grep '^BenchmarkOTPFlow' <<<"$GO_OUT" | tail -1)"
[ -n "$LINE" ] || { echo "benchmark failed:" >&2; echo "$GO_OUT" >&2; exit 1; }
field() { awk -v unit="$1" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$LINE"; }
FLOWS="$(field flows/s)"
P50="$(field p50-ms)"
P99="$(field p99-ms)"

awk -v tps="$TPS" -v lat="$PGB_LAT" -v flows="$FLOWS" -v p50="$P50" -v p99="$P99" 'BEGIN {
	ratio = flows / tps
	printf "pgbench -N -c 8          %10.1f tps   (latency avg %s ms)\n", tps, lat
	printf "OTP request+verify flows %10.1f /s    (p50 %s ms, p99 %s ms)\n", flows, p50, p99
	printf "flows/s per pgbench tps  %10.3f      target >= 0.300: %s\n", ratio, (ratio >= 0.3 ? "met" : "NOT met")
	printf "flow p99                 %10s ms   target <  50 ms: %s\n", p99, (p99 + 0 < 50 ? "met" : "NOT met")
}'
