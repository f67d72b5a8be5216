package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sethvargo/go-retry"

	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
)

// Publisher is the part of a Watermill publisher the relay uses.
type Publisher interface {
	Publish(topic string, msgs ...*message.Message) error
}

// Config of a relay.
type Config struct {
	Name      string        // checkpoint row and advisory-lock key; default "events"
	Topic     string        // full Kafka topic name
	BatchSize int           // rows per publish; default 500
	Idle      time.Duration // poll interval when nothing wakes the relay; default 250ms
	// SaveEvery bounds how often a busy relay writes its checkpoint (it
	// also writes it whenever it catches up, and at stop); what a crash
	// loses is re-sent. Default 100ms.
	SaveEvery time.Duration
	Metrics   prometheus.Registerer // optional: registers relay counters and the lag gauge
	// Signer signs every message; projections refuse unsigned ones.
	Signer *events.Signer
	// OpenTail, when set, connects a reader of the topic's end
	// (kafka.NewReader). A new leader reads back what the former one
	// published after the checkpoint it saved (a leader killed between
	// publishing and saving) and does not publish those events again, so
	// each event reaches Kafka once. Without it they are published again,
	// and the projections drop them.
	OpenTail func() (Tail, error)
	// Wake ticks after this process committed appends (store.CommitSignal).
	// The leading relay steps at once; a relay on standby passes the tick
	// on to the leader, in whichever process it runs, as a NOTIFY.
	Wake <-chan struct{}
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = "events"
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.Idle <= 0 {
		c.Idle = 250 * time.Millisecond
	}
	if c.SaveEvery <= 0 {
		c.SaveEvery = 100 * time.Millisecond
	}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.Topic == "" {
		errs = append(errs, errors.New("relay: topic is required"))
	}
	if c.Signer == nil {
		errs = append(errs, errors.New("relay: a signer is required"))
	}
	return errors.Join(errs...)
}

// Tail reads a topic's partitions backwards from their ends, a chunk of
// record values at a time in offset order, for as long as fn says more
// (kafka.Reader).
type Tail interface {
	ReadBack(ctx context.Context, topic string, fn func(values [][]byte) (more bool, err error)) error
	Close() error
}

// Relay publishes the event store to Kafka.
type Relay struct {
	cfg       Config
	pool      *pgxpool.Pool
	pub       Publisher
	log       *slog.Logger
	published prometheus.Counter
	batchTime prometheus.Histogram
	ahead     prometheus.Gauge
	isAhead   atomic.Bool // what ahead shows
	// heldSince is when rows began to wait behind an open transaction
	// (UnixNano), 0 while nothing waits.
	heldSince atomic.Int64
}

// New builds a relay.
func New(cfg Config, pool *pgxpool.Pool, pub Publisher, log *slog.Logger) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		cfg:  cfg,
		pool: pool,
		pub:  pub,
		log:  log.With("component", "relay", "relay", cfg.Name),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cfgd_relay_published_events_total", Help: "Events the relay published to Kafka.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}),
		batchTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cfgd_relay_publish_seconds", Help: "Time to publish one relay batch to Kafka.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name}, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		ahead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "cfgd_relay_checkpoint_ahead",
			Help:        "1 when the relay checkpoint's transaction id is above the cluster's next one (a restore into a new cluster): nothing new is published until it is reset.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}),
	}
	if cfg.Metrics != nil {
		lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cfgd_relay_lag_events", Help: "Events appended to the store and not yet published.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := r.Lag(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		})
		held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "cfgd_relay_held_back_seconds",
			Help:        "How long committed events have waited behind an older open transaction (the snapshot xmin); 0 when none wait.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}, func() float64 { return r.HeldBack().Seconds() })
		for _, c := range []prometheus.Collector{r.published, r.batchTime, lag, r.ahead, held} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("relay metrics: %w", err)
			}
		}
	}
	return r, nil
}

// NotifyChannel is the Postgres channel the leading relay listens on.
// Processes whose own relay is on standby (and tools that append) NOTIFY it
// after their appends committed.
const NotifyChannel = "cfgd_events"

// Notify wakes the leading relay from another process; call it after the
// appending transaction committed.
func Notify(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	if _, err := db.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel); err != nil {
		return fmt.Errorf("notify relay: %w", err)
	}
	return nil
}

// maxPendingPoll bounds the wait for rows held back by a long transaction.
const maxPendingPoll = 100 * time.Millisecond

// Restart backoff of Run: it grows from minBackoff up to maxBackoff while
// runs keep failing fast, and starts over after a run that lasted
// healthyRun.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	healthyRun = 10 * time.Second
)

// restarts is Run's wait between runs: process.Backoff while runs keep
// failing fast, started over after a run that lasted healthyRun.
type restarts struct{ bo retry.Backoff }

// next is the wait after a run that lasted ran.
func (r *restarts) next(ran time.Duration) time.Duration {
	if r.bo == nil || ran >= healthyRun {
		r.bo = process.Backoff(minBackoff, maxBackoff)
	}
	d, _ := r.bo.Next()
	return d
}

// Run relays until ctx ends. Only one relay of a name runs at a time across
// processes (a Postgres advisory lock); the others wait for the lock.
func (r *Relay) Run(ctx context.Context) error {
	var wait restarts
	for {
		start := time.Now()
		err := r.runLocked(ctx)
		if ctx.Err() != nil {
			return nil
		}
		d := wait.next(time.Since(start))
		r.log.WarnContext(ctx, "relay interrupted, retrying", "err", err, "in", d)
		if !process.Sleep(ctx, d) {
			return nil
		}
	}
}

func (r *Relay) runLocked(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	// The connection holds a session lock and LISTEN; never hand it back.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if err := r.standby(ctx, pc); err != nil {
		return err
	}
	pid := pc.PgConn().PID() // the lock's holder, for the fence
	l, err := listen(ctx, pc)
	if err != nil {
		return err
	}
	defer l.stop()
	return r.lead(ctx, l, pid)
}

// listener turns the notifications on a LISTENing connection into ticks.
type listener struct {
	notified chan struct{}
	failed   chan error
	stop     func()
}

func listen(ctx context.Context, pc *pgx.Conn) (*listener, error) {
	if _, err := pc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &listener{notified: make(chan struct{}, 1), failed: make(chan error, 1)}
	done := make(chan struct{})
	l.stop = func() {
		cancel()
		<-done // the listener owns pc until it returns
	}
	go func() {
		defer close(done)
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				l.failed <- err
				return
			}
			select {
			case l.notified <- struct{}{}:
			default:
			}
		}
	}()
	return l, nil
}

// lead relays while this process holds the lock: it steps until a step
// finds nothing, then waits for a commit in this process, a NOTIFY from
// another, rows held back by an open transaction, or the idle poll.
func (r *Relay) lead(ctx context.Context, l *listener, pid uint32) error {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return err
	}
	stored, err := r.storedAfter(ctx, ck)
	if err != nil {
		return err
	}
	r.log.InfoContext(ctx, "relay started", "topic", r.cfg.Topic)
	defer r.heldSince.Store(0)
	saved, savedAt := ck, time.Now()
	save := func(ctx context.Context) error {
		if ck == saved {
			return nil
		}
		if err := r.save(ctx, ck, pid); err != nil {
			return err
		}
		saved, savedAt = ck, time.Now()
		return nil
	}
	defer func() {
		// What was published is not published again after a clean stop.
		final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := save(final); err != nil {
			r.log.Warn("relay checkpoint not saved at stop; the last batches will be re-sent", "err", err)
		}
	}()
	var backoff time.Duration
	for {
		n, next, err := r.step(ctx, ck, pid, stored)
		ck = next // after a partial publish, what Kafka stored; saved at return
		if err != nil {
			return err
		}
		if n > 0 {
			r.heldSince.Store(0)
			backoff = 0
			if time.Since(savedAt) >= r.cfg.SaveEvery {
				if err := save(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if err := save(ctx); err != nil {
			return err
		}
		more, ahead, err := r.pending(ctx, ck)
		if err != nil {
			return err
		}
		if ahead {
			// Start over, re-reading the checkpoint, until an operator
			// resets it.
			return errCheckpointAhead
		}
		if !more {
			r.heldSince.Store(0)
		} else {
			r.heldSince.CompareAndSwap(0, time.Now().UnixNano())
		}
		wait := r.cfg.Idle
		if more {
			// Committed rows wait behind an older running transaction
			// (which may append nothing, so nothing will wake us for it).
			backoff = min(max(2*backoff, time.Millisecond), r.cfg.Idle, maxPendingPoll)
			wait = backoff
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case err := <-l.failed:
			t.Stop()
			return fmt.Errorf("wait for notification: %w", err)
		case <-r.cfg.Wake:
		case <-l.notified:
		case <-t.C:
		}
		t.Stop()
	}
}

// standby waits for the relay lock on pc. Meanwhile it forwards this
// process's append ticks to the leader as NOTIFYs.
func (r *Relay) standby(ctx context.Context, pc *pgx.Conn) error {
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		var ok bool
		if err := pc.QueryRow(ctx, lockSQL, r.cfg.Name).Scan(&ok); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			return nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.cfg.Wake:
				if err := Notify(ctx, pc); err != nil {
					return err
				}
			case <-retry.C:
				break wait
			}
		}
	}
}

type checkpoint struct {
	txID     int64
	position int64
}

// Step publishes one batch and saves the checkpoint; it returns how many
// events Kafka stored. Run does the same, saving the checkpoint at most
// every SaveEvery while it keeps finding events. Step takes no lock: it is
// for tests and tools, never to run beside a leading relay.
func (r *Relay) Step(ctx context.Context) (int, error) {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	n, next, err := r.step(ctx, ck, 0, nil)
	if n > 0 {
		if serr := r.save(ctx, next, 0); serr != nil {
			return n, errors.Join(err, serr)
		}
	}
	return n, err
}

// ErrNotLeader is returned when the relay finds it no longer holds its lock
// (its lock connection dropped): it stops publishing and goes back to
// standby.
var ErrNotLeader = errors.New("relay: advisory lock lost; another relay may lead")

// lockSQL is the relay's advisory lock key; heldSQL finds it on one backend.
const (
	lockSQL = `SELECT pg_try_advisory_lock(hashtext('cfgd-relay'), hashtext($1))`
	heldSQL = `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = hashtext('cfgd-relay')::oid AND objid = hashtext($1)::oid AND objsubid = 2 AND pid = $2::bigint)`
)

// fence fails unless the backend pid (0: no lock to check) still holds the
// relay's lock.
func (r *Relay) fence(ctx context.Context, pid uint32) error {
	if pid == 0 {
		return nil
	}
	var held bool
	if err := r.pool.QueryRow(ctx, `SELECT `+heldSQL, r.cfg.Name, int64(pid)).Scan(&held); err != nil {
		return fmt.Errorf("relay lock check: %w", err)
	}
	if !held {
		return ErrNotLeader
	}
	return nil
}

// firstFailer is a publish error that tells how far a batch got: every
// message before FirstFailed was stored (kafka.PublishError).
type firstFailer interface{ FirstFailed() int }

// firstAfter finds the first stored row after a checkpoint ($1 tx id, $2
// position) by walking the relay index, whatever plan the table's size
// suggested when the statement was first prepared (a bare EXISTS can get a
// sequential scan then, and keep it).
const firstAfter = `SELECT 1 FROM events WHERE (tx_id, position) > ($1::bigint::text::xid8, $2) ORDER BY tx_id, position LIMIT 1`

// step publishes the batch after ck and returns how many events Kafka
// stored and the checkpoint after them, which it does not save. After a
// partial failure that is the event before the first that failed, whatever
// Kafka stored after it: the next step sends them all again, in order. pid,
// when not 0, is the lock holder the step checks before publishing. Events
// whose id is in stored are in Kafka already (storedAfter): they are
// passed over, not sent.
func (r *Relay) step(ctx context.Context, ck checkpoint, pid uint32, stored map[uuid.UUID]bool) (int, checkpoint, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT tx_id::text::bigint, event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
		FROM events
		WHERE (tx_id, position) > ($1::bigint::text::xid8, $2)
		  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY events.tx_id, events.position -- the columns, so the index gives the order
		LIMIT $3`, ck.txID, ck.position, r.cfg.BatchSize)
	if err != nil {
		return 0, ck, fmt.Errorf("relay read: %w", err)
	}
	var (
		msgs    []*message.Message
		cks     []checkpoint
		passed  int
		last    = ck
		skipped = ck // the checkpoint that passes over what is stored before the first message
	)
	for rows.Next() {
		var tx int64
		e, err := store.ScanAfter(rows, &tx)
		if err != nil {
			rows.Close()
			return 0, ck, fmt.Errorf("relay scan: %w", err)
		}
		last = checkpoint{txID: tx, position: e.Position}
		if stored[e.ID] {
			passed++
			if len(msgs) == 0 {
				skipped = last
			}
			continue
		}
		m, err := SignedMessage(r.cfg.Signer, e)
		if err != nil {
			rows.Close()
			return 0, ck, err
		}
		msgs = append(msgs, m)
		cks = append(cks, checkpoint{txID: tx, position: e.Position})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, ck, fmt.Errorf("relay read: %w", err)
	}
	if len(msgs) == 0 {
		return passed, last, nil
	}
	if err := r.fence(ctx, pid); err != nil {
		return 0, ck, err
	}
	start := time.Now()
	if err := r.pub.Publish(r.cfg.Topic, msgs...); err != nil {
		var ff firstFailer
		if errors.As(err, &ff) && ff.FirstFailed() > 0 && ff.FirstFailed() < len(msgs) {
			n := ff.FirstFailed()
			r.published.Add(float64(n))
			return n, cks[n-1], fmt.Errorf("relay publish: %w", err)
		}
		return 0, skipped, fmt.Errorf("relay publish: %w", err)
	}
	r.published.Add(float64(len(msgs)))
	r.batchTime.Observe(time.Since(start).Seconds())
	return len(msgs) + passed, last, nil
}

// storedAfter reads back the ids of the events Kafka already holds past
// ck: a leader killed between publishing and saving its checkpoint left
// them there, and the next leader resumes from ck (finding 10 of the
// fault schedule). Each partition is read from its end until a chunk
// holds a record that is not an event of the store past ck: a leader
// publishes only past its checkpoint, so every record before that one is
// older. Not a high mark per partition: a partly failed publish can leave
// a hole before later records of the same partition, and the hole must be
// published.
func (r *Relay) storedAfter(ctx context.Context, ck checkpoint) (map[uuid.UUID]bool, error) {
	if r.cfg.OpenTail == nil {
		return nil, nil
	}
	tail, err := r.cfg.OpenTail()
	if err != nil {
		return nil, fmt.Errorf("relay: reading back the topic: %w", err)
	}
	defer tail.Close()
	stored := map[uuid.UUID]bool{}
	err = tail.ReadBack(ctx, r.cfg.Topic, func(values [][]byte) (bool, error) {
		ids := make([]uuid.UUID, 0, len(values))
		for _, v := range values {
			e, err := events.Unmarshal(v)
			if err != nil {
				return false, nil // not the relay's: read no further back
			}
			ids = append(ids, e.ID)
		}
		rows, err := r.pool.Query(ctx, storedAfterSQL, ids, ck.txID, ck.position)
		if err != nil {
			return false, fmt.Errorf("relay: events read back: %w", err)
		}
		after, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return false, fmt.Errorf("relay: events read back: %w", err)
		}
		for _, id := range after {
			stored[id] = true
		}
		return len(after) == len(ids), nil
	})
	if err != nil {
		return nil, fmt.Errorf("relay: reading back the topic: %w", err)
	}
	if len(stored) > 0 {
		r.log.InfoContext(ctx, "relay resumes after events the former leader published past its checkpoint", "events", len(stored))
	}
	return stored, nil
}

// storedAfterSQL keeps, of the event ids $1, those after the checkpoint
// ($2 tx id, $3 position).
const storedAfterSQL = `SELECT event_id FROM events WHERE event_id = ANY($1::uuid[])
	AND (tx_id, position) > ($2::bigint::text::xid8, $3)`

// pending tells whether rows after ck are stored, visible yet or not, and
// whether ck is ahead of the cluster's transaction ids.
func (r *Relay) pending(ctx context.Context, ck checkpoint) (more, ahead bool, err error) {
	if err := r.pool.QueryRow(ctx, `SELECT EXISTS (`+firstAfter+`), `+aheadSQL,
		ck.txID, ck.position).Scan(&more, &ahead); err != nil {
		return false, false, fmt.Errorf("relay read: %w", err)
	}
	r.noteAhead(ctx, ck, ahead)
	return more, ahead, nil
}

var errCheckpointAhead = errors.New("relay checkpoint is ahead of this cluster's transaction ids; reset relay_checkpoints")

// aheadSQL is true when the checkpoint's transaction id ($1) is one this
// cluster has not assigned yet: the database was restored into a new
// cluster, whose new events all sort before the checkpoint.
const aheadSQL = `$1::bigint::text::xid8 >= pg_snapshot_xmax(pg_current_snapshot())`

// noteAhead says, once per change, that the checkpoint is ahead.
func (r *Relay) noteAhead(ctx context.Context, ck checkpoint, ahead bool) {
	v := 0.0
	if ahead {
		v = 1
	}
	if r.isAhead.Swap(ahead) == ahead {
		return
	}
	r.ahead.Set(v)
	if ahead {
		r.log.ErrorContext(ctx, "RELAY CHECKPOINT IS AHEAD OF THIS DATABASE CLUSTER: no new event will be published. "+
			"The database was probably restored into a new cluster. Move the checkpoint to the last event "+
			"(UPDATE relay_checkpoints SET tx_id = (SELECT max(tx_id) FROM events), position = (SELECT max(position) FROM events) WHERE name = '...') "+
			"or delete its row to publish every event again", "checkpoint_tx_id", ck.txID, "name", r.cfg.Name)
	} else {
		r.log.InfoContext(ctx, "relay checkpoint is back in line with the cluster")
	}
}

// Ready fails while the relay cannot publish new events because its
// checkpoint is ahead of the cluster's transaction ids; for /readyz.
func (r *Relay) Ready(ctx context.Context) error {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return err
	}
	var ahead bool
	if err := r.pool.QueryRow(ctx, `SELECT `+aheadSQL, ck.txID).Scan(&ahead); err != nil {
		return fmt.Errorf("relay readiness: %w", err)
	}
	r.noteAhead(ctx, ck, ahead)
	if ahead {
		return process.NotReady(process.CheckpointAhead, fmt.Errorf("relay %s: checkpoint transaction id %d is ahead of this cluster (restored database?); reset relay_checkpoints", r.cfg.Name, ck.txID))
	}
	return nil
}

// HeldBack is how long committed events have waited behind an older open
// transaction, 0 when none wait.
func (r *Relay) HeldBack() time.Duration {
	since := r.heldSince.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}

// saveSQL moves the checkpoint forward only, and only while the relay holds
// its lock ($2, a backend pid; 0 when the caller holds no lock).
const saveSQL = `
	WITH f AS (SELECT ($2::bigint = 0 OR ` + heldSQL + `) AS held),
	u AS (
		INSERT INTO relay_checkpoints (name, tx_id, position, updated_at)
		SELECT $1, $3::bigint::text::xid8, $4, now() FROM f WHERE f.held
		ON CONFLICT (name) DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position, updated_at = now()
		WHERE (relay_checkpoints.tx_id, relay_checkpoints.position) < (excluded.tx_id, excluded.position)
		RETURNING 1
	)
	SELECT f.held, EXISTS (SELECT 1 FROM u) FROM f`

// save records ck. Events after the saved checkpoint are published again
// after a crash; consumers drop them by stream version.
func (r *Relay) save(ctx context.Context, ck checkpoint, pid uint32) error {
	var held, moved bool
	if err := r.pool.QueryRow(ctx, saveSQL, r.cfg.Name, int64(pid), ck.txID, ck.position).Scan(&held, &moved); err != nil {
		return fmt.Errorf("relay checkpoint: %w", err)
	}
	if !held {
		return ErrNotLeader
	}
	if !moved {
		return fmt.Errorf("relay checkpoint: stored checkpoint is at or after (%d, %d); another relay moved it", ck.txID, ck.position)
	}
	return nil
}

func (r *Relay) checkpoint(ctx context.Context) (checkpoint, error) {
	var ck checkpoint
	err := r.pool.QueryRow(ctx, `SELECT tx_id::text::bigint, position FROM relay_checkpoints WHERE name = $1`, r.cfg.Name).Scan(&ck.txID, &ck.position)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint{}, nil
	}
	if err != nil {
		return ck, fmt.Errorf("relay checkpoint: %w", err)
	}
	return ck, nil
}

// Lag returns how many appended events the relay has not yet published.
func (r *Relay) Lag(ctx context.Context) (int64, error) {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	var lag int64
	err = r.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE (tx_id, position) > ($1::bigint::text::xid8, $2)`,
		ck.txID, ck.position).Scan(&lag)
	if err != nil {
		return 0, fmt.Errorf("relay lag: %w", err)
	}
	return lag, nil
}

// SignedMessage is ToMessage with the body's signature in
// events.HeaderSignature: what the relay sends.
func SignedMessage(s *events.Signer, e events.Envelope) (*message.Message, error) {
	m, err := ToMessage(e)
	if err != nil {
		return nil, err
	}
	m.Metadata.Set(events.HeaderSignature, s.Sign(m.Payload))
	return m, nil
}

// ToMessage turns an envelope into a Watermill message, unsigned.
func ToMessage(e events.Envelope) (*message.Message, error) {
	body, err := events.Marshal(e)
	if err != nil {
		return nil, err
	}
	m := message.NewMessage(e.ID.String(), body)
	for k, v := range events.Headers(e) {
		m.Metadata.Set(k, v)
	}
	return m, nil
}
