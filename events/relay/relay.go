// Package relay moves appended events from the Postgres event store to Kafka
// (the transactional outbox). Delivery is at least once and in per-stream
// order. Rows are read in commit order, (tx_id, position), and only below the
// oldest running transaction (pg_snapshot_xmin), so an event whose
// transaction took an earlier position but commits later is never skipped.
// The checkpoint moves only after Kafka acknowledged the batch: a crash in
// between re-sends the batch, and consumers drop the duplicates by stream
// version.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/events"
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
	return errors.Join(errs...)
}

// Relay publishes the event store to Kafka.
type Relay struct {
	cfg       Config
	pool      *pgxpool.Pool
	pub       Publisher
	log       *slog.Logger
	published prometheus.Counter
	batchTime prometheus.Histogram
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
		for _, c := range []prometheus.Collector{r.published, r.batchTime, lag} {
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

// Run relays until ctx ends. Only one relay of a name runs at a time across
// processes (a Postgres advisory lock); the others wait for the lock.
func (r *Relay) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := r.runLocked(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.log.WarnContext(ctx, "relay interrupted, retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
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
	l, err := listen(ctx, pc)
	if err != nil {
		return err
	}
	defer l.stop()
	return r.lead(ctx, l)
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
func (r *Relay) lead(ctx context.Context, l *listener) error {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return err
	}
	r.log.InfoContext(ctx, "relay started", "topic", r.cfg.Topic)
	saved, savedAt := ck, time.Now()
	save := func(ctx context.Context) error {
		if ck == saved {
			return nil
		}
		if err := r.save(ctx, ck); err != nil {
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
		n, next, err := r.step(ctx, ck)
		if err != nil {
			return err
		}
		ck = next
		if n > 0 {
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
		more, err := r.pending(ctx, ck)
		if err != nil {
			return err
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
		if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('cfgd-relay'), hashtext($1))`, r.cfg.Name).Scan(&ok); err != nil {
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
// events it published. Run does the same, saving the checkpoint at most
// every SaveEvery while it keeps finding events.
func (r *Relay) Step(ctx context.Context) (int, error) {
	ck, err := r.checkpoint(ctx)
	if err != nil {
		return 0, err
	}
	n, next, err := r.step(ctx, ck)
	if err != nil || n == 0 {
		return 0, err
	}
	return n, r.save(ctx, next)
}

// firstAfter finds the first stored row after a checkpoint ($1 tx id, $2
// position) by walking the relay index, whatever plan the table's size
// suggested when the statement was first prepared (a bare EXISTS can get a
// sequential scan then, and keep it).
const firstAfter = `SELECT 1 FROM events WHERE (tx_id, position) > ($1::bigint::text::xid8, $2) ORDER BY tx_id, position LIMIT 1`

// step publishes the batch after ck and returns how many events it
// published and the checkpoint after them, which it does not save.
func (r *Relay) step(ctx context.Context, ck checkpoint) (int, checkpoint, error) {
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
		msgs []*message.Message
		last checkpoint
	)
	for rows.Next() {
		var tx int64
		var e events.Envelope
		var md []byte
		if err := rows.Scan(&tx, &e.ID, &e.Stream, &e.Version, &e.Position, &e.Type, &e.OccurredAt, &md, &e.Data); err != nil {
			rows.Close()
			return 0, ck, fmt.Errorf("relay scan: %w", err)
		}
		e.OccurredAt = e.OccurredAt.UTC()
		if err := json.Unmarshal(md, &e.Metadata); err != nil {
			rows.Close()
			return 0, ck, fmt.Errorf("relay metadata of %s: %w", e.ID, err)
		}
		m, err := ToMessage(e)
		if err != nil {
			rows.Close()
			return 0, ck, err
		}
		msgs = append(msgs, m)
		last = checkpoint{txID: tx, position: e.Position}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, ck, fmt.Errorf("relay read: %w", err)
	}
	if len(msgs) == 0 {
		return 0, ck, nil
	}
	start := time.Now()
	if err := r.pub.Publish(r.cfg.Topic, msgs...); err != nil {
		return 0, ck, fmt.Errorf("relay publish: %w", err)
	}
	r.published.Add(float64(len(msgs)))
	r.batchTime.Observe(time.Since(start).Seconds())
	return len(msgs), last, nil
}

// pending tells whether rows after ck are stored, visible yet or not.
func (r *Relay) pending(ctx context.Context, ck checkpoint) (bool, error) {
	var more bool
	if err := r.pool.QueryRow(ctx, `SELECT EXISTS (`+firstAfter+`)`, ck.txID, ck.position).Scan(&more); err != nil {
		return false, fmt.Errorf("relay read: %w", err)
	}
	return more, nil
}

// save records ck. Events after the saved checkpoint are published again
// after a crash; consumers drop them by stream version.
func (r *Relay) save(ctx context.Context, ck checkpoint) error {
	if _, err := r.pool.Exec(ctx, `
		INSERT INTO relay_checkpoints (name, tx_id, position, updated_at) VALUES ($1, $2::bigint::text::xid8, $3, now())
		ON CONFLICT (name) DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position, updated_at = now()`,
		r.cfg.Name, ck.txID, ck.position); err != nil {
		return fmt.Errorf("relay checkpoint: %w", err)
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

// ToMessage turns an envelope into the Watermill message the relay sends.
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
