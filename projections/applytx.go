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
	res, err := applyInTx(ctx, tx, []*Projection{p}, ds)
	if err != nil {
		return 0, err
	}
	if len(res.held) > 0 {
		e := res.held[0].env
		return 0, fmt.Errorf("projection %s: %s v%d came without its previous version", p.Name, e.Stream, e.Version)
	}
	return res.outcomes[p.Name][Applied], nil
}
