#!/usr/bin/env bash
# Every benchmark with its same-run baseline; `make bench` calls this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
echo "== outbox relay vs bare sarama producer" >&2
go test -run '^$' -bench '^BenchmarkRelay$' -benchtime 2x ./events/relay/ | grep -E '^Benchmark|relay/baseline'
echo "== projection runner vs raw consume" >&2
go test -run '^$' -bench '^BenchmarkProjectionApply$' -benchtime 3x ./projections/identity/ | grep -E '^Benchmark'
echo "== event-store inserts with and without a NOTIFY trigger" >&2
deploy/scripts/bench/notify.sh
echo "== OTP sign-in statements alone (the database-only ceiling) vs pgbench -N" >&2
deploy/scripts/bench/flow-sql.sh
echo "== OTP sign-in flows vs pgbench -N" >&2
deploy/scripts/bench/otp.sh
