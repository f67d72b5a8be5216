package projections

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/IBM/sarama"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
)

// Outcome of applying one envelope to one projection.
type Outcome int

// Outcomes.
const (
	Applied      Outcome = iota // handler ran, checkpoint advanced
	Duplicate                   // already applied: nothing changed
	Ignored                     // no handler for the type: checkpoint advanced only
	Held                        // an earlier version of the stream is missing: nothing changed yet
	DeadLettered                // given up on (see Runner): checkpoint advanced past it
)

var outcomeNames = [...]string{"applied", "duplicate", "ignored", "held", "dead_lettered"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// delivery is one event on its way into a group's projections.
type delivery struct {
	env events.Envelope
	ev  events.Event // nil when the registry does not know the type
	// dead maps a projection to the reason it gave up on this event: its
	// checkpoint moves past the event without running the handler.
	dead map[string]string
	src  *sarama.ConsumerMessage // where the event came from, for dead letters
}

// HandlerError is a projection handler's failure on one event.
type HandlerError struct {
	Projection string
	Env        events.Envelope
	Err        error
	d          *delivery
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("projection %s: apply %s %s v%d: %v", e.Projection, e.Env.Type, e.Env.Stream, e.Env.Version, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }

// errCheckpointRace: another consumer (during a rebalance) moved a
// checkpoint this batch also moves; the batch is rolled back and retried.
var errCheckpointRace = errors.New("projection checkpoint moved concurrently")

type ckey struct{ projection, stream string }

// batchResult is what one committed batch did.
type batchResult struct {
	held     []*delivery
	outcomes map[string]*[len(outcomeNames)]int // per projection
	maxPos   map[string]int64                   // per projection, highest position passed
}

// Apply runs p's handler for one envelope read from the event store, in
// one transaction with p's checkpoint for the stream. Only the version
// right after the checkpoint is applied; an older one is a duplicate and a
// newer one is Held (nothing changes: the caller delivers the missing
// versions first).
func Apply(ctx context.Context, pool *pgxpool.Pool, reg *events.Registry, p *Projection, env events.Envelope) (Outcome, error) {
	d, err := decoded(reg, p, env)
	if err != nil {
		return 0, err
	}
	res, err := applyBatch(ctx, pool, defaultLockTimeout, "", []*Projection{p}, []*delivery{d})
	if err != nil {
		return 0, err
	}
	for o, n := range res.outcomes[p.Name] {
		if n > 0 {
			return Outcome(o), nil
		}
	}
	return 0, fmt.Errorf("projection %s: no outcome for %s v%d", p.Name, env.Stream, env.Version)
}

// decoded is env ready to apply: its payload decoded, or none for a type
// p does not handle (the checkpoint still moves past it). Like the runner,
// it leaves the payload of a type p does not handle undecoded: most events
// of the log are such for most projections, and only the checkpoint moves
// for them. env comes from the event store, which keeps no schema level:
// a type the registry does not know was written by a newer cfgd (every
// type cfgd ever wrote stays registered), and may concern p, so it is
// *events.ErrNewerSchema, as is a newer version of a type p handles
// (Registry.Decode): a replay never rebuilds without them.
func decoded(reg *events.Registry, p *Projection, env events.Envelope) (*delivery, error) {
	d := &delivery{env: env}
	if !reg.Known(env.Type) {
		return nil, fmt.Errorf("projection %s: %w", p.Name, &events.ErrNewerSchema{Type: env.Type, Version: max(env.Metadata.SchemaVersion, 1)})
	}
	if !p.Handles(env.Type) {
		return d, nil
	}
	ev, err := reg.Decode(env)
	var unknown *events.ErrUnknownType
	switch {
	case errors.As(err, &unknown):
	case err != nil:
		return nil, fmt.Errorf("projection %s: %w", p.Name, err)
	default:
		d.ev = ev
	}
	return d, nil
}

// defaultLockTimeout: see Config.LockTimeout.
const defaultLockTimeout = 200 * time.Millisecond

// advisoryClass is the first key of the projections' advisory locks.
const advisoryClass = 0x63666764 // "cfgd"

// applyBatch applies batch in one transaction. With a group, it first
// takes a transaction lock on the group's partition the batch was read
// from: during a rebalance the partition's old and new owner may both hold
// the same events for a moment, and the second one then reads the first
// one's checkpoints and finds duplicates, instead of applying them again.
// One lock per batch is far cheaper than locking every checkpoint row.
func applyBatch(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration, group string, ps []*Projection, batch []*delivery) (batchResult, error) {
	var res batchResult
	// The lock timeout and the partition lock travel with BEGIN, in the
	// same round trip.
	begin := fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d", lockTimeout.Milliseconds())
	if src := batch[0].src; group != "" && src != nil && src.Topic != "" {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%s/%d", group, src.Topic, src.Partition)
		begin += fmt.Sprintf("; SELECT pg_advisory_xact_lock(%d, %d)", advisoryClass, int32(h.Sum32()))
	}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{BeginQuery: begin}, func(tx pgx.Tx) error {
		var err error
		res, err = applyInTx(ctx, tx, ps, batch, nil)
		return err
	})
	return res, err
}

// applyInTx applies batch to every projection of ps. Per projection and
// stream, a version at or below the checkpoint is a duplicate, the next
// version is applied (or, for a type the projection does not handle, only
// advances the checkpoint), and a later one is held: it is retried in the
// same call once the missing version shows up in the batch, and otherwise
// returned in held. Every checkpoint that moved is written in one
// statement at the end. With mem, the checkpoints are mem's instead of
// the table's, and only mem moves.
func applyInTx(ctx context.Context, tx pgx.Tx, ps []*Projection, batch []*delivery, mem *Checkpoints) (batchResult, error) {
	res := batchResult{outcomes: map[string]*[len(outcomeNames)]int{}, maxPos: map[string]int64{}}
	for _, p := range ps {
		res.outcomes[p.Name] = new([len(outcomeNames)]int)
	}
	var start map[ckey]int64
	var err error
	if mem != nil {
		start, err = mem.load(ps, batch)
	} else {
		start, err = loadCheckpoints(ctx, tx, ps, batch)
	}
	if err != nil {
		return res, err
	}
	cps := make(map[ckey]int64, len(start))
	for k, v := range start {
		cps[k] = v
	}
	type step struct {
		d *delivery
		p *Projection
	}
	type pair struct {
		d *delivery
		p string
	}
	var steps []step
	decided := map[pair]bool{}
	queue := batch
	for {
		progress := false
		var next []*delivery
		for _, d := range queue {
			held := false
			for _, p := range ps {
				if decided[pair{d, p.Name}] {
					continue
				}
				k := ckey{p.Name, d.env.Stream}
				switch v := d.env.Version; {
				case v <= cps[k]:
					decided[pair{d, p.Name}] = true
					res.outcomes[p.Name][Duplicate]++
				case v == cps[k]+1:
					decided[pair{d, p.Name}] = true
					cps[k] = v
					steps = append(steps, step{d, p})
					progress = true
				default:
					held = true
				}
			}
			if held {
				next = append(next, d)
			}
		}
		queue = next
		if len(queue) == 0 || !progress {
			break
		}
	}
	for _, d := range queue {
		for _, p := range ps {
			if !decided[pair{d, p.Name}] {
				res.outcomes[p.Name][Held]++
			}
		}
	}
	res.held = queue

	ptx := &pipeTx{tx: tx}
	for _, s := range steps {
		name := s.p.Name
		switch _, dead := s.d.dead[name]; {
		case dead:
			res.outcomes[name][DeadLettered]++
		case s.d.ev == nil || !s.p.Handles(s.d.env.Type):
			res.outcomes[name][Ignored]++
		default:
			ptx.owner = HandlerError{Projection: name, Env: s.d.env, d: s.d}
			if err := s.p.handlers[s.d.env.Type](ctx, ptx, s.d.env, s.d.ev); err != nil {
				// A queued statement of an earlier event may be what failed.
				if ptx.failed != nil {
					return res, ptx.failed
				}
				return res, &HandlerError{Projection: name, Env: s.d.env, Err: err, d: s.d}
			}
			res.outcomes[name][Applied]++
		}
		res.maxPos[name] = max(res.maxPos[name], s.d.env.Position)
	}
	if err := ptx.flush(ctx); err != nil {
		return res, err
	}
	if mem != nil {
		mem.save(start, cps)
		return res, nil
	}
	return res, saveCheckpoints(ctx, tx, start, cps)
}

// pipeTx is the Tx handed to handlers: Exec queues, everything else sends
// the queue first.
type pipeTx struct {
	tx     pgx.Tx
	batch  pgx.Batch
	owners []HandlerError // per queued statement, whose it is
	owner  HandlerError   // the handler running now
	failed *HandlerError  // a queued statement's failure
}

func (t *pipeTx) Exec(_ context.Context, sql string, args ...any) error {
	t.batch.Queue(sql, args...)
	t.owners = append(t.owners, t.owner)
	return nil
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// flush sends the queued statements in one round trip.
func (t *pipeTx) flush(ctx context.Context) error {
	if t.batch.Len() == 0 {
		return nil
	}
	// The results refer to the batch until they are read: send a copy.
	b, owners := t.batch, t.owners
	t.batch, t.owners = pgx.Batch{}, nil
	br := t.tx.SendBatch(ctx, &b)
	for i := range owners {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			he := owners[i]
			he.Err = err
			t.failed = &he
			return t.failed
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("projection statements: %w", err)
	}
	return nil
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// loadCheckpoints reads the checkpoints of every projection of ps for
// every stream in batch; a missing row is version 0.
func loadCheckpoints(ctx context.Context, tx pgx.Tx, ps []*Projection, batch []*delivery) (map[ckey]int64, error) {
	seen := map[string]bool{}
	var keys []ckey
	for _, d := range batch {
		if seen[d.env.Stream] {
			continue
		}
		seen[d.env.Stream] = true
		for _, p := range ps {
			keys = append(keys, ckey{p.Name, d.env.Stream})
		}
	}
	names, streams := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		names[i], streams[i] = k.projection, k.stream
	}
	// A lateral lookup per key stays on the primary key whatever the
	// table's size was when the connection prepared the statement (a join
	// got a sequential scan as the generic plan on a young table). LIMIT 1
	// (the key is the primary key) keeps the planner from flattening the
	// lookup back into that join.
	rows, err := tx.Query(ctx, `
		SELECT c.projection, c.stream_id, c.version
		FROM unnest($1::text[], $2::text[]) AS k (projection, stream_id)
		CROSS JOIN LATERAL (
			SELECT * FROM projection_checkpoints c
			WHERE c.projection = k.projection AND c.stream_id = k.stream_id
			LIMIT 1) c`, names, streams)
	if err != nil {
		return nil, fmt.Errorf("load checkpoints: %w", err)
	}
	out := make(map[ckey]int64, len(names))
	var k ckey
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&k.projection, &k.stream, &v}, func() error {
		out[k] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load checkpoints: %w", err)
	}
	return out, nil
}

// saveCheckpoints writes every checkpoint that moved. The guard keeps a
// checkpoint from going backwards; if a concurrent writer outside the
// partition lock (Apply, or a stream found in two partitions after the
// partition count changed) got there first, the row count tells, and the
// batch is rolled back and retried.
func saveCheckpoints(ctx context.Context, tx pgx.Tx, start, cps map[ckey]int64) error {
	var names, streams []string
	var versions []int64
	for k, v := range cps {
		if v != start[k] {
			names = append(names, k.projection)
			streams = append(streams, k.stream)
			versions = append(versions, v)
		}
	}
	if len(names) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO projection_checkpoints (projection, stream_id, version)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
		ON CONFLICT (projection, stream_id) DO UPDATE SET version = excluded.version
		WHERE projection_checkpoints.version < excluded.version`, names, streams, versions)
	if err != nil {
		return fmt.Errorf("save checkpoints: %w", err)
	}
	if tag.RowsAffected() != int64(len(names)) {
		return errCheckpointRace
	}
	return nil
}
