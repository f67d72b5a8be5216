#!/usr/bin/env bash
# OTP sign-in throughput next to pgbench on the same machine, in one run.
#
#   deploy/scripts/bench/otp.sh                      # 3 rounds of (pgbench -N 6 s, flows 6 s) at 8 clients
#   BENCH_SECONDS=10 BENCH_ROUNDS=5 deploy/scripts/bench/otp.sh
#   BENCH_CLIENTS="1 8" deploy/scripts/bench/otp.sh   # one table per client count
#
# pgbench runs against a scratch database on the local Postgres (created and
# dropped here); the Go benchmark starts the whole sign-in stack (HTTP,
# commands, event store, relay, embedded Kafka, projections, Redis, an
# in-process SMTP server) and runs request+verify flows. Both use the same
# number of clients, and the rounds alternate, because the throughput of
# this kind of shared machine drifts by tens of percent within minutes: a
# ratio is only meaningful between runs that sat next to each other.
# Target: flows/s >= 0.3 x pgbench tps, and a flow's p99 under 50 ms.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$ROOT/deploy/scripts/bench/lib.sh"
SECONDS_EACH="${BENCH_SECONDS:-6}"
ROUNDS="${BENCH_ROUNDS:-3}"
CLIENTS="${BENCH_CLIENTS:-8}"
DB="cfgd_pgbench_scratch_$$"
WORK="$(mktemp -d)"
trap 'drop_scratch; rm -rf "$WORK"' EXIT

pgbench_db "$DB"
echo "go: building the benchmark" >&2
(cd "$ROOT" && go test -c -o "$WORK/auth.test" ./api/auth/)

for c in $CLIENTS; do
	: >"$WORK/rounds"
	for r in $(seq "$ROUNDS"); do
		echo "round $r/$ROUNDS, $c clients: pgbench -N -T $SECONDS_EACH, then ${SECONDS_EACH}s of flows" >&2
		PGB_OUT="$(pgbench -h "$PGHOST" -U "$PGUSER" -N -c "$c" -j "$(( c < 2 ? 1 : 2 ))" -T "$SECONDS_EACH" "$DB" 2>&1)"
		TPS="$(awk '/^tps = / {print $3; exit}' <<<"$PGB_OUT")"
		[ -n "$TPS" ] || { echo "pgbench gave no tps:" >&2; echo "$PGB_OUT" >&2; exit 1; }
		GO_OUT="$(cd "$ROOT/api/auth" && CFGD_BENCH_CLIENTS="$c" "$WORK/auth.test" -test.run '^$' -test.bench '^BenchmarkOTPFlow$' \
			-test.benchtime "${SECONDS_EACH}s" -test.count 1 2>&1)"
		LINE="$(grep '^BenchmarkOTPFlow' <<<"$GO_OUT" | tail -1)"
		[ -n "$LINE" ] || { echo "benchmark failed:" >&2; echo "$GO_OUT" >&2; exit 1; }
		field() { awk -v unit="$1" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$LINE"; }
		echo "$TPS $(field flows/s) $(field p50-ms) $(field p99-ms)" >>"$WORK/rounds"
	done
	MEDIAN="$(awk '{print $2 / $1}' "$WORK/rounds" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')"
	awk -v c="$c" -v med="$MEDIAN" '
		{ tps[NR] = $1; fl[NR] = $2; p50[NR] = $3; p99[NR] = $4; ratio[NR] = $2 / $1 }
		END {
			printf "%d clients        pgbench -N tps   flows/s   flows per tps   flow p50 ms   flow p99 ms\n", c
			for (i = 1; i <= NR; i++) {
				printf "  round %d     %14.1f %9.1f %15.3f %13.2f %13.2f\n", i, tps[i], fl[i], ratio[i], p50[i], p99[i]
				if (p99[i] > worst) worst = p99[i]
			}
			printf "  median flows per pgbench tps %.3f (target >= 0.300: %s); worst flow p99 %.2f ms (target < 50: %s)\n",
				med, (med >= 0.3 ? "met" : "NOT met"), worst, (worst < 50 ? "met" : "NOT met")
		}' "$WORK/rounds"
done
