package sinks

import (
	"context"

	"github.com/cfgd/cfgd/projections/replay"
)

// RequestLogFence orders the sink's writes against a replay swapping rebuilt tables
// in (another process: `cfgd replay requestlog.clickhouse`). The sink
// caches, per partition, the highest offset the raw table holds; after a
// swap that cache describes tables that are gone, so it must be read again
// from the new ones, and no batch may be half written across a swap.
type RequestLogFence interface {
	// Shared runs fn while no swap can begin or be under way; gen is the
	// tables' generation, which every swap changes.
	Shared(ctx context.Context, fn func(gen int64) error) error
	// Own is Shared that also holds partitions parts of topic for writer
	// alone until fn returns, so two sinks (two consumer groups on the
	// topic, or a member that lost a partition in a rebalance and has not
	// noticed yet) never write one partition at once. stale are the
	// partitions another writer wrote last: their cached offsets are out
	// of date. base is added to each partition's offsets (after the topic
	// was created again).
	Own(ctx context.Context, topic string, parts []int32, writer string, fn func(gen int64, stale []int32, base map[int32]int64) error) error
	// Recreated records the topic's id and tells whether it replaced
	// another one (the topic was deleted and created again); if so, it
	// sets every partition's base to next's offset for it.
	Recreated(ctx context.Context, topic, id string, next func(ctx context.Context) (map[int32]int64, error)) (bool, error)
}

// PostgresFence is the RequestLogFence the replay of these tables takes
// exclusively: it lives with the replay engine, which owns both sides of
// it.
type PostgresFence = replay.PostgresFence

var _ RequestLogFence = PostgresFence{}
