#!/usr/bin/env bash
# Mutation testing over the packages whose guarantees the README makes:
# events/, projections/ and commands/. `make mutate` calls this.
#
# gremlins (pinned below) copies the module for each worker, so it runs on a
# clean copy of the tracked files (./data holds the local stack's database
# files, which it must not copy). Each surviving mutant is a missing test,
# unless it is listed in deploy/scripts/mutate/accepted.txt ("file:line:column
# MUTATOR  reason") as equivalent. The script prints the score per package
# set and fails when a survivor is not accepted.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
GREMLINS_VERSION=v0.6.0
# gremlins takes a folder and mutates everything below it.
PKGS=${MUTATE_PKGS:-"events projections commands"}
GOBIN="$(go env GOPATH)/bin"
if ! "$GOBIN/gremlins" --version 2>/dev/null | grep -q "${GREMLINS_VERSION#v}"; then
  go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work")
cd "$work"
out="$ROOT/data/mutate"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log
survivors="$out/survivors.txt"
: >"$survivors"
status=0
for rel in $PKGS; do
  rel="${rel#./}"
  rel="${rel%/...}"
  name="$(echo "$rel" | tr / _)"
  echo "== $rel" >&2
  # One worker: the tests use the shared local Postgres/Redis and their
  # own brokers; parallel mutants would only fight for two cores.
  "$GOBIN/gremlins" unleash --workers 1 --timeout-coefficient 6 \
    --output "$out/$name.json" "./$rel" 2>&1 |
    tee "$out/$name.log" | grep -E 'Killed:|Mutator coverage|Test efficacy|LIVED' >&2 || true
  grep -h 'LIVED' "$out/$name.log" | sed -E "s#.*LIVED +([A-Z_]+) at (.*)#$rel/\\2 \\1#" >>"$survivors" || true
done
killed=0 lived=0
for f in "$out"/*.json; do
  k=$(grep -o '"mutants_killed":[0-9]*' "$f" | grep -o '[0-9]*$' || echo 0)
  l=$(grep -o '"mutants_lived":[0-9]*' "$f" | grep -o '[0-9]*$' || echo 0)
  killed=$((killed + k)) lived=$((lived + l))
done
total=$((killed + lived))
if [ "$total" -gt 0 ]; then
  echo "mutation score: $killed killed of $total covered mutants ($((100 * killed / total))%)"
fi
unaccepted=0
while read -r line; do
  [ -z "$line" ] && continue
  loc="$(echo "$line" | awk '{print $1}')"
  if ! grep -qF "$loc" "$ROOT/deploy/scripts/mutate/accepted.txt"; then
    echo "surviving mutant not accepted: $line"
    unaccepted=$((unaccepted + 1))
  fi
done <"$survivors"
[ "$unaccepted" -eq 0 ] || status=1
exit $status
