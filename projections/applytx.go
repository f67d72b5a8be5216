package projections

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events"
)

// ApplyTx applies batch (envelopes in commit order) to p inside tx, with p's
// checkpoints, and reports how many events p's handler ran for. Replay uses
// it to write a projection into tables the caller chose (for example
// through the transaction's search_path) in batches of its own size. An
// event that would be held (an earlier version of its stream missing from
// the batch and the checkpoints) is an error: the caller reads in commit
// order, so a gap means the log was read wrongly.
func ApplyTx(ctx context.Context, tx pgx.Tx, reg *events.Registry, p *Projection, batch []events.Envelope) (int, error) {
	return applyTx(ctx, tx, reg, p, batch, nil)
}

// ApplyTxMem is ApplyTx with p's checkpoints in cps instead of the
// checkpoint table: nothing reads or writes projection_checkpoints, and cps
// moves (also when tx later fails to commit, so a failed batch leaves cps
// unusable). It is for a writer that alone writes the tables it applies
// into, such as a replay building its shadow tables, which writes cps into
// its checkpoint table once at the end (Checkpoints.Copy).
func ApplyTxMem(ctx context.Context, tx pgx.Tx, reg *events.Registry, p *Projection, batch []events.Envelope, cps *Checkpoints) (int, error) {
	if cps == nil || cps.name != p.Name {
		return 0, fmt.Errorf("projection %s: checkpoints of another projection", p.Name)
	}
	return applyTx(ctx, tx, reg, p, batch, cps)
}

func applyTx(ctx context.Context, tx pgx.Tx, reg *events.Registry, p *Projection, batch []events.Envelope, mem *Checkpoints) (int, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	ds := make([]*delivery, len(batch))
	for i, env := range batch {
		d, err := decoded(reg, p, env)
		if err != nil {
			return 0, err
		}
		ds[i] = d
	}
	res, err := applyInTx(ctx, tx, []*Projection{p}, ds, mem)
	if err != nil {
		return 0, err
	}
	if len(res.held) > 0 {
		e := res.held[0].env
		return 0, fmt.Errorf("projection %s: %s v%d came without its previous version", p.Name, e.Stream, e.Version)
	}
	return res.outcomes[p.Name][Applied], nil
}

// Checkpoints are one projection's per-stream checkpoints held in memory
// (see ApplyTxMem): a replay reads the whole log, and reading and writing
// a checkpoint row for every stream of every batch cost it more than its
// handlers did. They take about 100 bytes per stream.
type Checkpoints struct {
	name     string
	versions map[string]int64
}

// NewCheckpoints returns empty checkpoints of p: every stream at version 0.
func NewCheckpoints(p *Projection) *Checkpoints {
	return &Checkpoints{name: p.Name, versions: map[string]int64{}}
}

func (c *Checkpoints) load(ps []*Projection, batch []*delivery) (map[ckey]int64, error) {
	if len(ps) != 1 || ps[0].Name != c.name {
		return nil, fmt.Errorf("projection %s: checkpoints of another projection", c.name)
	}
	out := make(map[ckey]int64, len(batch))
	for _, d := range batch {
		if v, ok := c.versions[d.env.Stream]; ok {
			out[ckey{c.name, d.env.Stream}] = v
		}
	}
	return out, nil
}

func (c *Checkpoints) save(start, cps map[ckey]int64) {
	for k, v := range cps {
		if v != start[k] {
			c.versions[k.stream] = v
		}
	}
}

// Copy inserts every checkpoint of c into projection_checkpoints, as tx's
// search_path resolves it, with COPY.
func (c *Checkpoints) Copy(ctx context.Context, tx pgx.Tx) error {
	rows := make([][]any, 0, len(c.versions))
	for s, v := range c.versions {
		rows = append(rows, []any{c.name, s, v})
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"projection_checkpoints"}, []string{"projection", "stream_id", "version"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("projection %s: write checkpoints: %w", c.name, err)
	}
	return nil
}
