package apikey

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// Use is what cfgd observed of one key since the last flush: Requests
// requests authenticated by it, the last at LastUsed (server time). A
// caller's own report (a request-log event naming an api_key_id) is never
// a Use: only the server that checked the key records one.
type Use struct {
	KeyID    int64
	Requests int64
	LastUsed time.Time
}

// usesVersion is the first byte of a record; a record of another version
// is unreadable to this code.
const usesVersion = 1

// UsesFormat names the record format of the API-key usage topic, and
// UsesVersion is the version this build writes (the first byte of each
// record, and its events.HeaderSchemaVersion).
const (
	UsesFormat  = "apikey.usage"
	UsesVersion = usesVersion
)

// AppendUses encodes uses as one record value: a version byte, then per
// use the key id, the count and the last use in Unix microseconds (what
// Postgres keeps), as varints.
func AppendUses(dst []byte, uses []Use) []byte {
	dst = append(dst, usesVersion)
	for _, u := range uses {
		dst = binary.AppendUvarint(dst, uint64(u.KeyID))
		dst = binary.AppendUvarint(dst, uint64(u.Requests))
		dst = binary.AppendVarint(dst, u.LastUsed.UnixMicro())
	}
	return dst
}

// ErrBadUses marks a record that is not an encoding of uses.
var ErrBadUses = errors.New("not an API-key usage record")

// DecodeUses decodes a value of AppendUses, appending to dst.
func DecodeUses(b []byte, dst []Use) ([]Use, error) {
	if len(b) == 0 || b[0] != usesVersion {
		return dst, fmt.Errorf("%w: unknown version", ErrBadUses)
	}
	b = b[1:]
	for len(b) > 0 {
		var vals [2]uint64
		for i := range vals {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return dst, fmt.Errorf("%w: truncated", ErrBadUses)
			}
			vals[i], b = v, b[n:]
		}
		at, n := binary.Varint(b)
		if n <= 0 {
			return dst, fmt.Errorf("%w: truncated", ErrBadUses)
		}
		b = b[n:]
		if vals[0] == 0 || vals[0] > 1<<62 || vals[1] == 0 || vals[1] > 1<<62 {
			return dst, fmt.Errorf("%w: key %d, count %d", ErrBadUses, vals[0], vals[1])
		}
		dst = append(dst, Use{KeyID: int64(vals[0]), Requests: int64(vals[1]), LastUsed: time.UnixMicro(at).UTC()})
	}
	return dst, nil
}

// UsageRecorderConfig configures a UsageRecorder.
type UsageRecorderConfig struct {
	Bus kafka.Config
	// FlushEvery is how often the gathered uses go to Kafka (default 1s):
	// it bounds how late a key's request_count moves.
	FlushEvery time.Duration
	// Timeout bounds one flush (default 5s).
	Timeout time.Duration
	// Signer signs each record as the relay signs domain events (header
	// events.HeaderSignature), so a broker login alone cannot move a key's
	// counters; nil sends them unsigned (tests of the recorder alone).
	Signer *events.Signer
}

// DefaultUsageRecorderConfig returns the defaults for bus c.
func DefaultUsageRecorderConfig(c kafka.Config) UsageRecorderConfig {
	return UsageRecorderConfig{Bus: c, FlushEvery: time.Second, Timeout: 5 * time.Second}
}

// Validate joins every problem of c.
func (c UsageRecorderConfig) Validate() error {
	var errs []error
	if err := c.Bus.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.FlushEvery <= 0 {
		errs = append(errs, errors.New("apikey usage recorder: FlushEvery must be positive"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("apikey usage recorder: Timeout must be positive"))
	}
	return errors.Join(errs...)
}

// UsageRecorder gathers the requests cfgd authenticated by API key, per
// key, and sends them to the usage topic every FlushEvery through the one
// Kafka producer. Gathering per key keeps memory bounded by the number of
// keys, so uses are kept (not dropped) while Kafka is down and sent once
// it is back; a request never waits for Kafka.
type UsageRecorder struct {
	cfg   UsageRecorderConfig
	p     *kafka.Producer
	topic string
	log   *slog.Logger

	mu      sync.Mutex
	pending map[int64]Use
	// settling counts the flushes whose records Kafka may still store:
	// their uses wait for the records' final results (Close waits too).
	settling sync.WaitGroup
}

// NewUsageRecorder returns a recorder; it does not connect yet.
func NewUsageRecorder(cfg UsageRecorderConfig, log *slog.Logger) (*UsageRecorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := kafka.NewProducer(cfg.Bus, kafka.ProducerOptions{Retries: 3, RetryBackoff: 100 * time.Millisecond, Timeout: cfg.Timeout,
		Topics: []string{kafka.TopicAPIKeyUsage}}, log)
	if err != nil {
		return nil, err
	}
	return &UsageRecorder{cfg: cfg, p: p, topic: cfg.Bus.Topic(kafka.TopicAPIKeyUsage), log: log, pending: map[int64]Use{}}, nil
}

// Record notes one request authenticated by key keyID at at (server time).
func (r *UsageRecorder) Record(keyID int64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(Use{KeyID: keyID, Requests: 1, LastUsed: at})
}

func (r *UsageRecorder) add(u Use) {
	p := r.pending[u.KeyID]
	p.KeyID = u.KeyID
	p.Requests += u.Requests
	if u.LastUsed.After(p.LastUsed) {
		p.LastUsed = u.LastUsed
	}
	r.pending[u.KeyID] = p
}

// Flush sends what was gathered; on failure it keeps it for the next one.
// The producer is idempotent, so a retried record is stored once. A send
// that timed out while the producer still holds its records keeps their
// uses back until each record has its final result (it may be stored
// late): only those of the records not stored go to a later flush, so a
// use is never counted twice (chaos finding 2, issue 29).
func (r *UsageRecorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	taken := r.pending
	r.pending = map[int64]Use{}
	r.mu.Unlock()
	if len(taken) == 0 {
		return nil
	}
	uses := slices.SortedFunc(maps.Values(taken), func(a, b Use) int { return cmp.Compare(a.KeyID, b.KeyID) })
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var msgs []*sarama.ProducerMessage
	for i := 0; i < len(uses); i += usesPerRecord {
		buf := AppendUses(nil, uses[i:min(i+usesPerRecord, len(uses))])
		m := &sarama.ProducerMessage{Topic: r.topic, Value: sarama.ByteEncoder(buf), Headers: kafka.SchemaHeaders(UsesVersion)}
		if r.cfg.Signer != nil {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(events.HeaderSignature), Value: []byte(r.cfg.Signer.Sign(buf))})
		}
		msgs = append(msgs, m)
	}
	if err := r.p.Send(ctx, msgs...); err != nil {
		if kd, ok := errors.AsType[*kafka.InDoubtError](err); ok {
			r.settling.Add(1)
			go func() {
				defer r.settling.Done()
				r.keepLost(kd, uses)
			}()
		} else {
			r.keep(uses)
		}
		return fmt.Errorf("API-key usage: %w", err)
	}
	return nil
}

// usesPerRecord bounds the uses of one record: far below any message
// size limit.
const usesPerRecord = 20_000

func (r *UsageRecorder) keep(uses []Use) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range uses {
		r.add(u)
	}
}

// keepLost keeps for a later flush the uses of the records of kd's send
// (usesPerRecord of uses each) that Kafka did not store, once each has its
// final result: sarama gives it within its retries, at once when the
// producer closes.
func (r *UsageRecorder) keepLost(kd *kafka.InDoubtError, uses []Use) {
	err := kd.Settled(context.Background())
	pe, ok := errors.AsType[*kafka.PublishError](err)
	if !ok {
		return // every record stored
	}
	for _, i := range pe.Failed {
		r.keep(uses[i*usesPerRecord : min((i+1)*usesPerRecord, len(uses))])
	}
}

// Run flushes every FlushEvery until ctx ends, then once more and closes
// the producer. Kafka being down is logged and waited for.
func (r *UsageRecorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ferr := r.Flush(context.WithoutCancel(ctx))
			// What a flush keeps back (failed, or settled as not stored
			// once Close has stopped the producer) is lost.
			err := r.Close()
			r.mu.Lock()
			lost := len(r.pending)
			r.mu.Unlock()
			if lost > 0 {
				r.log.Warn("API-key usage lost at shutdown", "keys", lost, "err", ferr)
			}
			return err
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("API-key usage kept for the next flush", "err", err)
			}
		}
	}
}

// Close stops the producer, then waits until the records of the flushes
// that timed out have their final results; Run does it when it ends.
func (r *UsageRecorder) Close() error {
	err := r.p.Close()
	r.settling.Wait()
	return err
}
