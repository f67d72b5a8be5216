#!/usr/bin/env bash
# make test-upgrade: builds cfgd as it was at UPGRADE_FROM (a git revision;
# default: the last release in docs/changelog.md) from this repository's own
# history, in a git worktree under $CFGD_DATA_DIR/upgrade, and runs
# TestUpgrade (cmd/cfgd/faults, build tag upgrade) from that build to this
# tree: docs/upgrading.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
GO=${GO:-go}
from=${UPGRADE_FROM:-}
if [ -z "$from" ]; then
	release=$(sed -n 's/^## \([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\) — .*/\1/p' docs/changelog.md | head -n 1)
	[ -n "$release" ] || { echo "test-upgrade: docs/changelog.md names no release; set UPGRADE_FROM" >&2; exit 2; }
	# A release is its tag, or the commit that cut it ("release X.Y.Z ...").
	from=$(git rev-parse -q --verify "refs/tags/v$release^{commit}" ||
		git log --format=%H -n 1 -E --grep="^release $release([^0-9.]|\$)" || true)
	[ -n "$from" ] || { echo "test-upgrade: no tag v$release and no commit 'release $release' in this clone; set UPGRADE_FROM" >&2; exit 2; }
	echo "test-upgrade: from release $release"
fi
rev=$(git rev-parse --verify -q "$from^{commit}") || { echo "test-upgrade: $from is no commit of this clone" >&2; exit 2; }
data=${CFGD_DATA_DIR:-$PWD/data}/upgrade
bin=$data/cfgd-$rev
echo "test-upgrade: from $(git log -n 1 --format='%h %s' "$rev" | cut -c1-100)"
if [ ! -x "$bin" ]; then
	mkdir -p "$data"
	src=$data/src-$rev
	rm -rf "$src"
	git worktree prune
	git worktree add -q --detach "$src" "$rev"
	trap 'git worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"' EXIT
	echo "test-upgrade: building $rev"
	(cd "$src" && GOFLAGS=-buildvcs=false "$GO" build -o "$bin.tmp" ./cmd/cfgd)
	mv "$bin.tmp" "$bin"
fi
CFGD_UPGRADE_FROM_BIN=$bin CFGD_UPGRADE_FROM=$(git rev-parse --short "$rev") \
	"$GO" test -tags upgrade -count=1 -run '^TestUpgrade$' -timeout 15m -v ./cmd/cfgd/faults/
