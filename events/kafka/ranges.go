package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// ErrTruncated refuses to rebuild from a topic that no longer holds its
// first records (retention deleted them): the rebuilt tables would lack
// what those records counted, while the live ones still have it.
var ErrTruncated = errors.New("the topic no longer holds its first records (retention deleted them); a rebuild from it would lose what they counted, so the live tables are kept")

// Reader reads offset ranges of topics, outside any consumer group: what
// replays, dead-letter listings and tests read. Topics are full names
// (Config.Topic).
type Reader struct {
	client sarama.Client
}

// NewReader connects a reader to c's brokers.
func NewReader(c Config) (*Reader, error) {
	sc := c.ConsumerSarama()
	// A range read is a long backlog: large fetches, a deeper buffer.
	sc.Consumer.Fetch.Default = 8 << 20
	sc.ChannelBufferSize = 64
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Reader{client: client}, nil
}

// Close disconnects the reader.
func (r *Reader) Close() error { return r.client.Close() }

// Complete checks that every partition of topic still starts at offset 0.
func (r *Reader) Complete(topic string) error {
	if err := r.client.RefreshMetadata(topic); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	ps, err := r.client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	for _, p := range ps {
		oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
		}
		if oldest > 0 {
			return fmt.Errorf("topic %s partition %d starts at offset %d: %w", topic, p, oldest, ErrTruncated)
		}
	}
	return nil
}

// Ends returns, per partition of topic, the offset the next record will
// get: a rebuild reads up to it.
func (r *Reader) Ends(topic string) (map[int32]int64, error) {
	client := r.client
	if err := client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	ps, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(ps))
	for _, p := range ps {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("topic %s/%d: end offset: %w", topic, p, err)
		}
		out[p] = end
	}
	return out, nil
}

// span is the range Read reads of partition p: from from (the oldest
// record kept when absent or older) up to to, cut at the partition's end.
func (r *Reader) span(topic string, p int32, from map[int32]int64, to int64) (int64, int64, error) {
	oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return 0, 0, fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
	}
	// Never wait for records the topic does not hold (a stored offset
	// from before the topic was recreated).
	newest, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return 0, 0, fmt.Errorf("topic %s/%d: end offset: %w", topic, p, err)
	}
	start, ok := from[p]
	if !ok || start < oldest {
		start = oldest
	}
	return start, min(to, newest), nil
}

// Backlog counts the records Read would read.
func (r *Reader) Backlog(topic string, from, to map[int32]int64) (int64, error) {
	var n int64
	for p, end := range to {
		start, end, err := r.span(topic, p, from, end)
		if err != nil {
			return 0, err
		}
		n += max(end-start, 0)
	}
	return n, nil
}

// Read reads, for every partition in to, the records of topic from
// from[p] (the oldest one kept when from has no entry or it is older) up
// to to[p] exclusive, one partition after the other, and hands them to fn
// in batches of at most batch records in offset order. It returns the
// offset after the last record read of each partition (from[p] for a
// partition with nothing to read).
func (r *Reader) Read(ctx context.Context, topic string, from, to map[int32]int64, batch int,
	fn func(ctx context.Context, partition int32, msgs []*sarama.ConsumerMessage) error) (map[int32]int64, error) {
	next := make(map[int32]int64, len(to))
	for p, o := range from {
		next[p] = o
	}
	var consumer sarama.Consumer
	defer func() {
		if consumer != nil {
			_ = consumer.Close()
		}
	}()
	for p, end := range to {
		start, end, err := r.span(topic, p, from, end)
		if err != nil {
			return next, err
		}
		if start >= end {
			continue
		}
		if consumer == nil {
			if consumer, err = sarama.NewConsumerFromClient(r.client); err != nil {
				return next, fmt.Errorf("topic %s: consumer: %w", topic, err)
			}
		}
		if err := readPartition(ctx, consumer, topic, p, start, end, batch, fn); err != nil {
			return next, err
		}
		next[p] = end
	}
	return next, nil
}

// ReadConcurrently is Read with every partition read at once, one
// goroutine each: fn runs on the partition's goroutine (so concurrently
// for different partitions, in offset order within one) and must be safe
// for that. The first error, fn's or a partition's, stops the others; the
// offsets it returns are then those of the partitions read to their end.
// A replay that decodes as it reads gets every core reading this way.
func (r *Reader) ReadConcurrently(ctx context.Context, topic string, from, to map[int32]int64, batch int,
	fn func(ctx context.Context, partition int32, msgs []*sarama.ConsumerMessage) error) (map[int32]int64, error) {
	next := make(map[int32]int64, len(to))
	for p, o := range from {
		next[p] = o
	}
	type part struct {
		p          int32
		start, end int64
	}
	var parts []part
	for p, end := range to {
		start, end, err := r.span(topic, p, from, end)
		if err != nil {
			return next, err
		}
		if start < end {
			parts = append(parts, part{p, start, end})
		}
	}
	if len(parts) == 0 {
		return next, nil
	}
	consumer, err := sarama.NewConsumerFromClient(r.client)
	if err != nil {
		return next, fmt.Errorf("topic %s: consumer: %w", topic, err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for _, pt := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := readPartition(ctx, consumer, topic, pt.p, pt.start, pt.end, batch, fn)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				next[pt.p] = pt.end
				return
			}
			// The first error is the cause; the others are the
			// cancellation it caused.
			if first == nil {
				first = err
				cancel()
			}
		}()
	}
	wg.Wait()
	return next, first
}

// Starts returns, per partition of topic, the offset of the oldest record
// it still holds (its end when it holds none): what retention kept.
func (r *Reader) Starts(topic string) (map[int32]int64, error) {
	if err := r.client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	ps, err := r.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(ps))
	for _, p := range ps {
		oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
		}
		out[p] = oldest
	}
	return out, nil
}

// ReadAll reads every record topic holds now, partition after partition;
// a topic that does not exist holds none.
func (r *Reader) ReadAll(ctx context.Context, topic string, batch int,
	fn func(ctx context.Context, partition int32, msgs []*sarama.ConsumerMessage) error) error {
	ends, err := r.Ends(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = r.Read(ctx, topic, nil, ends, batch, fn)
	return err
}

func readPartition(ctx context.Context, consumer sarama.Consumer, topic string, p int32, start, end int64, batch int,
	fn func(ctx context.Context, partition int32, msgs []*sarama.ConsumerMessage) error) error {
	pc, err := consumer.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("topic %s/%d from %d: %w", topic, p, start, err)
	}
	defer pc.AsyncClose()
	var msgs []*sarama.ConsumerMessage
	for {
		var m *sarama.ConsumerMessage
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s/%d: %w", topic, p, ctx.Err())
		case cerr, ok := <-pc.Errors():
			if !ok {
				return fmt.Errorf("topic %s/%d: consumer closed", topic, p)
			}
			return fmt.Errorf("topic %s/%d: %w", topic, p, cerr)
		case m = <-pc.Messages():
		}
		if m == nil {
			return fmt.Errorf("topic %s/%d: consumer closed", topic, p)
		}
		// A record at or past end (offsets may skip): the range is read.
		done := m.Offset >= end
		if !done {
			msgs = append(msgs, m)
			done = m.Offset+1 >= end
		}
		if len(msgs) > 0 && (len(msgs) >= batch || done) {
			if err := fn(ctx, p, msgs); err != nil {
				return err
			}
			msgs = nil
		}
		if done {
			return nil
		}
	}
}

// ReadBack reads each partition of topic backwards from its end, a chunk of
// records at a time (64, then twice as many each time), handing fn each
// chunk's values in offset order, until fn says a partition has been read
// far enough or its oldest record is reached. A producer taking over from
// another that may have died mid-send (the event relay's next leader) finds
// with it what is already stored past the point it resumes from.
func (r *Reader) ReadBack(ctx context.Context, topic string, fn func(values [][]byte) (more bool, err error)) error {
	if err := r.client.RefreshMetadata(topic); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	ps, err := r.client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(r.client)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer consumer.Close()
	for _, p := range ps {
		oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
		}
		end, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("topic %s/%d: end offset: %w", topic, p, err)
		}
		for chunk := int64(64); end > oldest; chunk *= 2 {
			start := max(oldest, end-chunk)
			var values [][]byte
			if err := readPartition(ctx, consumer, topic, p, start, end, int(end-start), func(_ context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
				for _, m := range msgs {
					values = append(values, m.Value)
				}
				return nil
			}); err != nil {
				return err
			}
			more, err := fn(values)
			if err != nil {
				return err
			}
			if !more {
				break
			}
			end = start
		}
	}
	return nil
}
