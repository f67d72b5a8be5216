package requestlog

import (
	"context"

	"github.com/cfgd/cfgd/projections/replay"
)

// Fence orders the sink's writes against a replay swapping rebuilt tables
// in (another process: `cfgd replay requestlog.clickhouse`). The sink
// caches, per partition, the highest offset the raw table holds; after a
// swap that cache describes tables that are gone, so it must be read again
// from the new ones, and no batch may be half written across a swap.
type Fence interface {
	// Shared runs fn while no swap can begin or be under way; gen is the
	// tables' generation, which every swap changes.
	Shared(ctx context.Context, fn func(gen int64) error) error
}

// PostgresFence is the Fence the replay of these tables takes
// exclusively: it lives with the replay engine, which owns both sides of
// it.
type PostgresFence = replay.PostgresFence

var _ Fence = PostgresFence{}
