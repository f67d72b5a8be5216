package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sethvargo/go-retry"

	"github.com/cfgd/cfgd/deploy/process"
)

// Handler applies one batch to a store. It returns nil once the store
// holds the batch: only then are the batch's offsets committed. Any other
// error has the batch tried again (WithRetry) or ends the session, so the
// batch is delivered again; an error made by Stop ends Consume with it.
// A handler must make a batch seen twice harmless: Kafka delivers at
// least once.
type Handler func(ctx context.Context, b *Batch) error

// Batch is what one Handler call applies.
type Batch struct {
	// Messages in offset order within each partition. Empty when the
	// handler held messages (Hold) and is called again without news.
	Messages []*sarama.ConsumerMessage
	// Final is set on the last try of a session that is ending
	// (WithDrain): there is no retry after it.
	Final bool
	// Session changes with every consumer-group session (each rebalance):
	// what a handler cached of its store for the partitions it held (say,
	// the offsets the store holds) may be stale after it changes.
	Session uint64

	claim   *claim
	loop    *loop
	held    any
	holding bool
	from    int64
	full    bool
}

// Partition is the partition of the batch's messages, or -1 when batches
// span partitions (WithSpan).
func (b *Batch) Partition() int32 {
	if b.claim == nil {
		return -1
	}
	return b.claim.partition
}

// Held is what the previous call on this partition passed to Hold, or nil.
func (b *Batch) Held() any {
	if b.claim == nil {
		return nil
	}
	return b.claim.held
}

// Hold keeps state (messages the handler cannot apply yet, say an event
// waiting for an earlier one) for the next call on this partition: the
// offset commit stops before offset from, and the handler is called again
// after the retry delay even when nothing new arrives. full stops reading
// the partition until then. Only for batches of one partition.
func (b *Batch) Hold(state any, from int64, full bool) {
	b.held, b.holding, b.from, b.full = state, true, from, full
}

// DeadLetter publishes m to the dead-letter topic (WithDeadLetter) with the
// reason, the consumer that gave up and the cause, retrying until Kafka
// took it or ctx ends: a message must never disappear silently.
func (b *Batch) DeadLetter(ctx context.Context, m *sarama.ConsumerMessage, consumer, reason string, cause error) error {
	if b.loop.dlq == nil {
		return errors.New("kafka: dead letter without a dead-letter topic (WithDeadLetter)")
	}
	return b.loop.dlq.send(ctx, m, consumer, reason, cause)
}

type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// Stop makes a Handler's error end Consume, which returns err, without
// committing the batch: what a crash would do.
func Stop(err error) error { return &stopError{err: err} }

// YieldError is a Handler's answer when it meets a record its build cannot
// fully understand (an *events.ErrNewerSchema: a newer version of a record
// it reads, or a type only a newer cfgd knows). Such a record is never
// skipped, dead-lettered or committed past: the handler applies the
// batch's records before it (in its partition; the other partitions' whole)
// and yields. The loop commits the offsets up to the held records and no
// further, reports Cause through WithHealth, WithWaiting and the
// cfgd_kafka_consumer_waiting_newer gauge, and leaves the consumer group
// for Config.YieldBackoff, so that a newer member of the group is assigned
// the partition and applies it; then it joins again (and yields again if
// it gets the partition back and the record is still there).
type YieldError struct {
	Cause error
	// At is, per held partition, the first record the handler did not
	// apply.
	At []*sarama.ConsumerMessage
}

func (e *YieldError) Error() string { return e.Cause.Error() }
func (e *YieldError) Unwrap() error { return e.Cause }

// Yield is the YieldError of cause, holding each partition at its record
// in at.
func Yield(cause error, at ...*sarama.ConsumerMessage) error {
	return &YieldError{Cause: cause, At: at}
}

// DefaultYieldBackoff is Config.YieldBackoff's default.
const DefaultYieldBackoff = 30 * time.Second

// Health receives a consumer's readiness: why it is not keeping up (its
// store or Kafka is down), or nil.
type Health interface{ Set(error) }

// ConsumeOption configures Consume.
type ConsumeOption func(*consumeOptions)

type consumeOptions struct {
	batch      int
	linger     time.Duration
	gap        time.Duration
	weigh      func(*sarama.ConsumerMessage) int
	weighed    bool // WithWeight: a message may weigh many
	span       bool
	retry      bool
	first, max time.Duration
	deadLetter string
	health     Health
	metrics    prometheus.Registerer
	drain      time.Duration
	manual     bool
	log        *slog.Logger
	setup      func(context.Context) error
	waiting    Health
}

// WithBatch bounds a batch: it goes to the handler when it weighs n
// (WithWeight; by default each message weighs 1) or linger after its first
// message, whichever comes first. With linger 0 a batch is what has
// arrived by the time the handler is free, up to n. Default 500, 0.
func WithBatch(n int, linger time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.batch, o.linger = n, linger }
}

// WithCatchUp closes a lingering batch (WithBatch with linger) as soon as
// the member has read every partition it holds up to its high watermark
// (there is nothing more to add to it: the consumer has caught up), but
// no sooner than gap after the previous batch went to the handler. The
// linger then bounds only a batch the consumer keeps falling behind on,
// and a quiet stream is applied within about gap instead of linger,
// while the handler is called at most 1/gap times per second (say, at
// most that many inserts, hence new parts, per table). A full batch still
// goes at once.
func WithCatchUp(gap time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.gap = gap }
}

// WithWeight weighs each message for WithBatch (say, the events a record
// packs).
func WithWeight(weigh func(*sarama.ConsumerMessage) int) ConsumeOption {
	return func(o *consumeOptions) { o.weigh, o.weighed = weigh, true }
}

// readAhead is how many messages of a partition sarama may hold before the
// batcher takes them: room for two batches, so the next one is fetched
// while one applies. Weighed messages are counted as messages, not by
// weight: a request-log record packs up to 512 events, and room for two
// batches of 50,000 events as 100,000 records would hold a backlog's
// hundreds of megabytes per partition in memory; 256 records are two and
// a half such batches.
func (o *consumeOptions) readAhead() int {
	if o.weighed {
		return readAheadRecords
	}
	return max(2*o.batch, readAheadRecords)
}

// readAheadRecords bounds the read-ahead of weighed messages (and is the
// least of any).
const readAheadRecords = 256

// WithSpan makes one batch out of the messages of every partition the
// member holds (few large inserts), instead of one batch per partition
// (each partition applied concurrently).
func WithSpan() ConsumeOption { return func(o *consumeOptions) { o.span = true } }

// WithRetry retries a failed batch with process.Backoff(first, max) until it is
// applied or the session ends; reading pauses meanwhile. It also sets the
// delay before a held batch (Batch.Hold) is tried again. Without it a
// failed batch ends the session and comes again after the rejoin.
func WithRetry(first, max time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retry, o.first, o.max = true, first, max }
}

// WithDeadLetter names the topic (before Config.TopicPrefix) that
// Batch.DeadLetter writes to; it is created with the consumed topics.
func WithDeadLetter(topic string) ConsumeOption {
	return func(o *consumeOptions) { o.deadLetter = topic }
}

// WithHealth reports readiness to h: an error while Kafka or the store is
// down, nil while the consumer keeps up.
func WithHealth(h Health) ConsumeOption { return func(o *consumeOptions) { o.health = h } }

// WithMetrics registers the consumer metrics in r: per partition the lag
// behind the high watermark, per group whether it keeps up.
func WithMetrics(r prometheus.Registerer) ConsumeOption {
	return func(o *consumeOptions) { o.metrics = r }
}

// WithDrain gives the batch in hand one last try, bounded by timeout, when
// the session ends (shutdown or rebalance); without it that batch is
// dropped and delivered again to the next owner.
func WithDrain(timeout time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.drain = timeout }
}

// WithCommitEach commits the offsets of every applied batch at once
// (synchronously) instead of marking them for the next periodic commit:
// less to reread after a restart, for consumers whose batches are large.
// It also keeps only a few records per partition in memory, so memory
// stays bounded while the store is down.
func WithCommitEach() ConsumeOption { return func(o *consumeOptions) { o.manual = true } }

// WithSetup runs fn once the topics exist, before the consumer joins its
// group, until it succeeds (reported through WithHealth meanwhile): say,
// recording where the topic ended when this build first started on it.
func WithSetup(fn func(context.Context) error) ConsumeOption {
	return func(o *consumeOptions) { o.setup = fn }
}

// WithWaiting reports to h only why the consumer waits for a newer cfgd
// (a handler yielded: YieldError), and nil once it no longer does: for
// consumers whose readiness says nothing else.
func WithWaiting(h Health) ConsumeOption { return func(o *consumeOptions) { o.waiting = h } }

// WithLog sets the logger (default: discard).
func WithLog(l *slog.Logger) ConsumeOption { return func(o *consumeOptions) { o.log = l } }

// Consume reads topics (names before Config.TopicPrefix) as consumer group
// group and hands batches to h until ctx ends, then returns nil, or until
// h returns a Stop error, which it returns. Kafka being down is waited
// for (and reported through WithHealth), never a reason to return. The
// offsets of a batch are committed only after h applied it.
func Consume(ctx context.Context, c Config, group string, topics []string, h Handler, opts ...ConsumeOption) error {
	o := consumeOptions{batch: 500, first: 100 * time.Millisecond, max: 5 * time.Second,
		weigh: func(*sarama.ConsumerMessage) int { return 1 }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 || o.linger < 0 || o.gap < 0 || o.first <= 0 || o.max < o.first {
		return fmt.Errorf("kafka consumer %s: batch must be at least 1, linger and catch-up gap not negative, retry delays positive", group)
	}
	l := &loop{o: o, group: group, h: h, log: o.log.With("group", group), heldAt: map[tp]int64{},
		yieldFor: cmp.Or(c.YieldBackoff, DefaultYieldBackoff)}
	if err := l.register(c, topics); err != nil {
		return err
	}
	l.setHealth(process.NotReady(process.Starting, fmt.Errorf("kafka consumer %s is starting", group)))
	names := topics
	if o.deadLetter != "" {
		names = append(append([]string(nil), topics...), o.deadLetter)
	}
	if err := l.wait(ctx, "kafka topics", func(ctx context.Context) error { return EnsureTopics(ctx, c, l.log, names...) }); err != nil {
		return nil
	}
	if o.setup != nil {
		if err := l.wait(ctx, "consumer setup", o.setup); err != nil {
			return nil
		}
	}
	sc := c.ConsumerSarama()
	if c.Replica != "" {
		sc.Consumer.Group.InstanceId = instanceID(group, c.Replica)
	}
	if o.manual {
		sc.Consumer.Offsets.AutoCommit.Enable = false
		sc.ChannelBufferSize = 16
		sc.Consumer.Fetch.Default = 1 << 20
		sc.Consumer.MaxProcessingTime = time.Second
	} else {
		sc.ChannelBufferSize = o.readAhead()
	}
	var cg sarama.ConsumerGroup
	var wg sync.WaitGroup
	join := func() error {
		if err := l.wait(ctx, "kafka consumer group", func(context.Context) error {
			var err error
			cg, err = sarama.NewConsumerGroup(c.Brokers, group, sc)
			return err
		}); err != nil {
			return err
		}
		errs := cg.Errors()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for err := range errs {
				l.log.Warn("kafka consumer", "err", err)
			}
		}()
		return nil
	}
	if err := join(); err != nil {
		return nil
	}
	defer func() { _ = cg.Close() }()
	if o.deadLetter != "" {
		l.dlq = &deadLetters{c: c, topic: c.Topic(o.deadLetter), log: l.log, first: o.first, max: o.max}
		defer l.dlq.close()
	}
	defer wg.Wait()
	l.setHealth(nil)
	full := make([]string, len(topics))
	for i, t := range topics {
		full[i] = c.Topic(t)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.cancel = cancel
	bo := process.Backoff(o.first, o.max)
	for sctx.Err() == nil {
		// Consume returns at every rebalance; the loop rejoins.
		session, end := context.WithCancel(sctx)
		l.endSession.Store(&end)
		err := cg.Consume(session, full, l)
		end()
		if p := l.fatal.Load(); p != nil {
			_ = cg.Close()
			return *p
		}
		if l.yielded.Swap(false) && sctx.Err() == nil {
			// A handler met a record only a newer cfgd understands: leave
			// the group, so its coordinator gives the partition to another
			// member (a static member, Config.Replica, is dropped only
			// after the session timeout), and come back later.
			_ = cg.Close()
			l.log.Warn("left the consumer group so that a newer cfgd takes the partition; joining again later", "after", l.yieldFor)
			if !process.Sleep(sctx, l.yieldFor) || join() != nil {
				break
			}
			continue
		}
		if errors.Is(err, sarama.ErrClosedConsumerGroup) {
			break
		}
		if err != nil && sctx.Err() == nil {
			if errors.Is(err, sarama.ErrFencedInstancedId) {
				// Another process joined as this member: two replicas share
				// a REPLICA__ID and would take the partitions from each
				// other forever. Say so where the operator looks.
				err = process.NotReady(process.Fenced, fmt.Errorf("member %s was fenced by another process with the same replica id (REPLICA__ID must differ per replica): %w", sc.Consumer.Group.InstanceId, err))
			}
			l.setHealth(fmt.Errorf("kafka: %w", err))
			l.log.Warn("kafka consumer group session", "err", err)
			process.Wait(sctx, bo)
			continue
		}
		bo = process.Backoff(o.first, o.max)
	}
	_ = cg.Close()
	if p := l.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// loop is the sarama handler of one consumer group.
type loop struct {
	o      consumeOptions
	group  string
	h      Handler
	log    *slog.Logger
	dlq    *deadLetters
	fatal  atomic.Pointer[error]
	cancel context.CancelFunc
	// session counts consumer-group sessions.
	session atomic.Uint64

	lag   *prometheus.GaugeVec
	ready *prometheus.GaugeVec
	newer *prometheus.GaugeVec

	// yieldFor is how long the member stays out of the group after a
	// handler yielded (YieldError); yielded says one did in this session,
	// endSession ends the session.
	yieldFor   time.Duration
	yielded    atomic.Bool
	endSession atomic.Pointer[context.CancelFunc]
	// waiting is why the member waits for a newer cfgd (nil: it does
	// not); heldAt the first record not applied of each partition held
	// for it, until the partition's offset passes it or another member
	// has the partition.
	waiting atomic.Pointer[error]
	waitMu  sync.Mutex
	heldAt  map[tp]int64

	// WithSpan: the session's one batcher, fed by every claim.
	in     chan *sarama.ConsumerMessage
	stop   chan struct{}
	done   chan struct{}
	claims sync.Map // topic/partition -> sarama.ConsumerGroupClaim
}

// claim is the state of one claimed partition (not WithSpan).
type claim struct {
	topic     string
	partition int32
	src       sarama.ConsumerGroupClaim
	held      any
	holding   bool
	full      bool
	seen      int64 // the highest offset handed to the handler
}

func (l *loop) wait(ctx context.Context, what string, fn func(context.Context) error) error {
	bo := process.Backoff(l.o.first, l.o.max)
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		l.setHealth(fmt.Errorf("%s: %w", what, err))
		l.log.WarnContext(ctx, "waiting for a dependency", "for", what, "err", err)
		if !process.Wait(ctx, bo) {
			return ctx.Err()
		}
	}
}

func (l *loop) setHealth(err error) {
	if err == nil {
		if w := l.waiting.Load(); w != nil {
			err = *w
		}
	}
	if l.o.health != nil {
		l.o.health.Set(err)
	}
	if l.ready != nil {
		v := 1.0
		if err != nil {
			v = 0
		}
		l.ready.WithLabelValues(l.group).Set(v)
	}
}

// register adds the consumer metrics to the registerer, sharing them with
// the other consumers of the process.
func (l *loop) register(c Config, topics []string) error {
	if l.o.metrics == nil {
		return nil
	}
	m, err := consumerMetrics(l.o.metrics, c, l.group, topics)
	l.lag, l.ready, l.newer = m.lag, m.ready, m.newer
	return err
}

// InitConsumerMetrics creates the consumer metrics of group in r before
// its Consume starts (which may wait for a dependency first), so they are
// exported from the process's start: ready 0, the lag and the waiting for
// a newer cfgd of every partition the topics are created with 0. Consume
// with WithMetrics(r) then shares them.
func InitConsumerMetrics(r prometheus.Registerer, c Config, group string, topics ...string) error {
	_, err := consumerMetrics(r, c, group, topics)
	return err
}

type loopMetrics struct{ lag, ready, newer *prometheus.GaugeVec }

func consumerMetrics(r prometheus.Registerer, c Config, group string, topics []string) (loopMetrics, error) {
	var m loopMetrics
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cfgd_kafka_consumer_lag_records", Help: "Records of a partition after the consumer group's last applied batch (high watermark minus committed offset).",
	}, []string{"group", "topic", "partition"})
	ready := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cfgd_kafka_consumer_ready", Help: "1 while a consumer group keeps up, 0 while it waits for Kafka or its store.",
	}, []string{"group"})
	newer := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cfgd_kafka_consumer_waiting_newer", Help: "1 while this member holds a partition at a record only a newer cfgd understands (it left the group for a newer member to take it), else 0.",
	}, []string{"group", "topic", "partition"})
	var err error
	if m.lag, err = registerShared(r, lag); err != nil {
		return m, err
	}
	if m.newer, err = registerShared(r, newer); err != nil {
		return m, err
	}
	for _, t := range topics {
		for p := range c.Partitions {
			m.lag.WithLabelValues(group, c.Topic(t), strconv.Itoa(p))
			m.newer.WithLabelValues(group, c.Topic(t), strconv.Itoa(p))
		}
	}
	if m.ready, err = registerShared(r, ready); err != nil {
		return m, err
	}
	m.ready.WithLabelValues(group)
	return m, nil
}

func registerShared(r prometheus.Registerer, g *prometheus.GaugeVec) (*prometheus.GaugeVec, error) {
	err := r.Register(g)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
			return existing, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kafka consumer metrics: %w", err)
	}
	return g, nil
}

func (l *loop) Setup(sess sarama.ConsumerGroupSession) error {
	l.session.Add(1)
	// Partitions held for a newer cfgd that another member has now are
	// its to apply.
	claims := sess.Claims()
	l.release(func(k tp, _ int64) bool { return !slices.Contains(claims[k.topic], k.p) })
	if l.o.span {
		l.in = make(chan *sarama.ConsumerMessage, 64)
		l.stop = make(chan struct{})
		l.done = make(chan struct{})
		go func() {
			defer close(l.done)
			l.batcher(sess, l.in, l.stop, nil)
		}()
	}
	return nil
}

func (l *loop) Cleanup(sarama.ConsumerGroupSession) error {
	if l.o.span {
		close(l.stop)
		<-l.done
		l.claims.Clear()
	}
	return nil
}

func (l *loop) ConsumeClaim(sess sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	// The group's offset is past a record held for a newer cfgd: another
	// member applied it.
	l.release(func(k tp, heldAt int64) bool {
		return k == tp{c.Topic(), c.Partition()} && c.InitialOffset() > heldAt
	})
	if !l.o.span {
		cl := &claim{topic: c.Topic(), partition: c.Partition(), src: c, seen: -1}
		l.batcher(sess, c.Messages(), sess.Context().Done(), cl)
		return nil
	}
	l.claims.Store(claimKey(c.Topic(), c.Partition()), c)
	for {
		select {
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			select {
			case l.in <- m:
			case <-sess.Context().Done():
				return nil
			case <-l.done:
				return nil
			}
		case <-sess.Context().Done():
			return nil
		case <-l.done:
			return nil
		}
	}
}

// instanceID is the static member id of replica in group. Kafka allows
// letters, digits, '.', '_' and '-', up to 249 characters; a group name
// of cfgd's and a replica id of at most 100 fit.
func instanceID(group, replica string) string { return group + "." + replica }

// ValidReplica tells why id cannot be a Config.Replica (part of a
// group.instance.id), or nil.
func ValidReplica(id string) error {
	ok := id != "" && len(id) <= 100
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("replica id %q: 1 to 100 letters, digits, '.', '_' or '-'", id)
	}
	return nil
}

func claimKey(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

// batcher gathers batches from in and applies them until stop.
func (l *loop) batcher(sess sarama.ConsumerGroupSession, in <-chan *sarama.ConsumerMessage, stop <-chan struct{}, cl *claim) {
	var msgs []*sarama.ConsumerMessage
	weight := 0
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	var holdBackoff retry.Backoff
	// WithCatchUp: the highest offset read per partition, when the last
	// batch went to the handler, and the wait for the gap after it.
	read := map[tp]int64{}
	var applied time.Time
	gap := time.NewTimer(time.Hour)
	gap.Stop()
	defer gap.Stop()
	for {
		reading := in
		if cl != nil && cl.full {
			reading = nil // too much held: wait for the retry
		}
		apply := false
		select {
		case m, ok := <-reading:
			if !ok {
				l.final(sess, msgs, cl)
				return
			}
			if len(msgs) == 0 && l.o.linger > 0 {
				linger.Reset(l.o.linger)
			}
			msgs = append(msgs, m)
			weight += l.o.weigh(m)
			read[tp{m.Topic, m.Partition}] = m.Offset
			if l.o.linger == 0 {
			drain:
				for weight < l.o.batch {
					select {
					case m, ok := <-in:
						if !ok {
							break drain
						}
						msgs = append(msgs, m)
						weight += l.o.weigh(m)
					default:
						break drain
					}
				}
				apply = true
			} else if weight >= l.o.batch {
				apply = true
			} else if l.o.gap > 0 && len(in) == 0 && l.caughtUp(read, cl) {
				if wait := l.o.gap - time.Since(applied); wait > 0 {
					gap.Reset(wait)
				} else {
					apply = true
				}
			}
		case <-gap.C:
			// More may have come meanwhile: a batch still short of its end
			// waits for it (or for its linger).
			apply = len(in) == 0 && l.caughtUp(read, cl)
		case <-linger.C:
			apply = true
		case <-again.C:
			apply = true
		case <-stop:
			l.final(sess, msgs, cl)
			return
		}
		if !apply || (len(msgs) == 0 && (cl == nil || !cl.holding)) {
			continue
		}
		again.Stop()
		linger.Stop()
		gap.Stop()
		applied = time.Now()
		if err := l.apply(sess, msgs, cl, false); err != nil {
			return
		}
		msgs, weight = nil, 0
		if cl != nil && cl.holding {
			if holdBackoff == nil {
				holdBackoff = process.Backoff(l.o.first, l.o.max)
			}
			d, _ := holdBackoff.Next()
			again.Reset(d)
		} else {
			holdBackoff = nil
		}
	}
}

// caughtUp tells whether the member has read every partition it holds (or
// cl's, without WithSpan) up to the high watermark of its last fetch, read
// being the highest offset read per partition. A partition not read from
// yet counts as caught up while nothing of it waits in its claim: it
// starts at an offset sarama may still have to resolve (oldest, newest).
func (l *loop) caughtUp(read map[tp]int64, cl *claim) bool {
	at := func(c sarama.ConsumerGroupClaim) bool {
		off, ok := read[tp{c.Topic(), c.Partition()}]
		if !ok {
			if c.InitialOffset() < 0 {
				return len(c.Messages()) == 0
			}
			off = c.InitialOffset() - 1
		}
		return off+1 >= c.HighWaterMarkOffset()
	}
	if cl != nil {
		return at(cl.src)
	}
	all := true
	l.claims.Range(func(_, v any) bool {
		all = at(v.(sarama.ConsumerGroupClaim))
		return all
	})
	return all
}

// final gives what is in hand one last try when the session ends.
func (l *loop) final(sess sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage, cl *claim) {
	if len(msgs) == 0 || l.o.drain <= 0 {
		return
	}
	_ = l.apply(sess, msgs, cl, true)
}

// apply hands msgs to the handler, retrying as configured, then commits
// their offsets. It fails when the session ends first, on a Stop, or on an
// error without WithRetry.
func (l *loop) apply(sess sarama.ConsumerGroupSession, msgs []*sarama.ConsumerMessage, cl *claim, final bool) error {
	ctx := sess.Context()
	if final {
		// The session's context is done already: bound the last try.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.o.drain)
		defer cancel()
	}
	var bo retry.Backoff
	for {
		b := &Batch{Messages: msgs, Final: final, Session: l.session.Load(), claim: cl, loop: l}
		err := l.h(ctx, b)
		if err == nil {
			l.commit(sess, b)
			return nil
		}
		var stop *stopError
		if errors.As(err, &stop) {
			l.fatal.CompareAndSwap(nil, &stop.err)
			l.cancel()
			return err
		}
		var y *YieldError
		if errors.As(err, &y) {
			l.yield(sess, b, y)
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		l.setHealth(fmt.Errorf("%s: %w", l.group, err))
		l.log.WarnContext(ctx, "batch not applied", "messages", len(msgs), "err", err, "retry", l.o.retry && !final)
		if final || !l.o.retry {
			return err
		}
		if bo == nil {
			bo = process.Backoff(l.o.first, l.o.max)
		}
		if !process.Wait(ctx, bo) {
			return err
		}
	}
}

// tp is a topic's partition.
type tp struct {
	topic string
	p     int32
}

// yield commits b's records before the ones y holds (never past them),
// says why the member waits, and ends the session: the loop leaves the
// group for a while (Config.YieldBackoff).
func (l *loop) yield(sess sarama.ConsumerGroupSession, b *Batch, y *YieldError) {
	held := map[tp]int64{}
	for _, m := range y.At {
		k := tp{m.Topic, m.Partition}
		if o, ok := held[k]; !ok || m.Offset < o {
			held[k] = m.Offset
		}
	}
	applied := make([]*sarama.ConsumerMessage, 0, len(b.Messages))
	for _, m := range b.Messages {
		if o, ok := held[tp{m.Topic, m.Partition}]; ok && m.Offset >= o {
			continue
		}
		applied = append(applied, m)
	}
	err := y.Cause
	l.waitMu.Lock()
	for k, o := range held {
		l.heldAt[k] = o
		if l.newer != nil {
			l.newer.WithLabelValues(l.group, k.topic, strconv.Itoa(int(k.p))).Set(1)
		}
		l.log.Warn("holding a partition at a record only a newer cfgd understands: nothing past it is committed, and a newer member of the group takes the partition",
			"topic", k.topic, "partition", k.p, "offset", o, "need", err)
	}
	l.waiting.Store(&err)
	l.waitMu.Unlock()
	if l.o.waiting != nil {
		l.o.waiting.Set(err)
	}
	c := *b
	c.Messages = applied
	l.commit(sess, &c)
	if !l.o.manual {
		sess.Commit()
	}
	l.yielded.Store(true)
	if end := l.endSession.Load(); end != nil {
		(*end)()
	}
}

// release stops waiting for a newer cfgd on the held partitions done says
// are done with (given their held offset); with none left, the member
// no longer waits.
func (l *loop) release(done func(k tp, heldAt int64) bool) {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	if len(l.heldAt) == 0 {
		return
	}
	for k, o := range l.heldAt {
		if done(k, o) {
			delete(l.heldAt, k)
			if l.newer != nil {
				l.newer.WithLabelValues(l.group, k.topic, strconv.Itoa(int(k.p))).Set(0)
			}
		}
	}
	if len(l.heldAt) == 0 {
		l.waiting.Store(nil)
		if l.o.waiting != nil {
			l.o.waiting.Set(nil)
		}
		l.setHealth(nil)
	}
}

// commit marks the offsets after b's messages (or before what b holds) and
// commits them when WithCommitEach.
func (l *loop) commit(sess sarama.ConsumerGroupSession, b *Batch) {
	l.setHealth(nil)
	next := map[tp]int64{}
	for _, m := range b.Messages {
		k := tp{m.Topic, m.Partition}
		next[k] = max(next[k], m.Offset+1)
	}
	if cl := b.claim; cl != nil {
		for _, m := range b.Messages {
			cl.seen = max(cl.seen, m.Offset)
		}
		cl.held, cl.holding, cl.full = b.held, b.holding, b.full && b.holding
		k := tp{cl.topic, cl.partition}
		switch {
		case b.holding:
			next[k] = b.from
		case cl.seen >= 0:
			next[k] = cl.seen + 1
		}
	}
	for k, off := range next {
		sess.MarkOffset(k.topic, k.p, off, "")
		if l.lag != nil {
			var hwm int64
			if b.claim != nil {
				hwm = b.claim.src.HighWaterMarkOffset()
			} else if c, ok := l.claims.Load(claimKey(k.topic, k.p)); ok {
				hwm = c.(sarama.ConsumerGroupClaim).HighWaterMarkOffset()
			}
			l.lag.WithLabelValues(l.group, k.topic, strconv.Itoa(int(k.p))).Set(float64(max(hwm-off, 0)))
		}
	}
	if l.o.manual {
		sess.Commit()
	}
	// Past a held record: a newer member applied it, or this build can.
	l.release(func(k tp, heldAt int64) bool { off, ok := next[k]; return ok && off > heldAt })
}
