package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
)

// ErrTruncated refuses to rebuild from a topic that no longer holds its
// first records (retention deleted them): the rebuilt tables would lack
// what those records counted, while the live ones still have it.
var ErrTruncated = errors.New("the topic no longer holds its first records (retention deleted them); a rebuild from it would lose what they counted, so the live tables are kept")

// Complete checks that every partition of topic still starts at offset 0.
func Complete(client sarama.Client, topic string) error {
	ps, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	for _, p := range ps {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
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
// get: a feed's Rebuild reads up to it.
func Ends(client sarama.Client, topic string) (map[int32]int64, error) {
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

// Backlog counts the records ReadPartitions would read: those of topic
// from from[p] (the oldest one kept when absent or older) up to to[p] or
// the partition's end, over the partitions of to.
func Backlog(client sarama.Client, topic string, from, to map[int32]int64) (int64, error) {
	var n int64
	for p, end := range to {
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return 0, fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
		}
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, fmt.Errorf("topic %s/%d: end offset: %w", topic, p, err)
		}
		end = min(end, newest)
		start, ok := from[p]
		if !ok || start < oldest {
			start = oldest
		}
		n += max(end-start, 0)
	}
	return n, nil
}

// ReadPartitions reads, for every partition in to, the records of topic
// from from[p] (the oldest one kept when from has no entry or it is older)
// up to to[p] exclusive, one partition after the other, and hands them to
// fn in batches of at most batch records in offset order. It returns the
// offset after the last record read of each partition (from[p] for a
// partition with nothing to read).
func ReadPartitions(ctx context.Context, client sarama.Client, topic string, from, to map[int32]int64, batch int,
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
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return next, fmt.Errorf("topic %s/%d: oldest offset: %w", topic, p, err)
		}
		start, ok := from[p]
		if !ok || start < oldest {
			start = oldest
		}
		// Never wait for records the topic does not hold (a stored offset
		// from before the topic was recreated): the swap holds its locks
		// while a feed reads.
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return next, fmt.Errorf("topic %s/%d: end offset: %w", topic, p, err)
		}
		end = min(end, newest)
		if start >= end {
			continue
		}
		if consumer == nil {
			if consumer, err = sarama.NewConsumerFromClient(client); err != nil {
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
				return fmt.Errorf("topic %s/%d: %w", topic, p, errors.New("consumer closed"))
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

// rebuildPasses bounds the rereads of a feed's topic before the swap.
const rebuildPasses = 3

// RebuildFromTopic is the body of a feed's Rebuild: it checks that topic still
// holds its first records, then reads it from the oldest ones in up to
// three passes. Each pass notes the partitions' ends, lets the events
// committed so far be applied (caughtUp), then reads up to those ends,
// applying each batch of a partition in a transaction of its own on conn.
// What arrives during one pass is read by the next, so the swap, which
// holds the live tables, has little left to catch up. It returns the
// records read and where the last complete pass stopped in each partition.
func RebuildFromTopic(ctx context.Context, client sarama.Client, conn *pgx.Conn, topic string, batch int,
	caughtUp func(context.Context) error, progress func(read, total int64),
	apply func(ctx context.Context, tx pgx.Tx, partition int32, msgs []*sarama.ConsumerMessage) error) (int64, map[int32]int64, error) {
	if err := client.RefreshMetadata(topic); err != nil {
		return 0, nil, fmt.Errorf("kafka: %w", err)
	}
	if err := Complete(client, topic); err != nil {
		return 0, nil, err
	}
	var n, total int64
	var next map[int32]int64
	for range rebuildPasses {
		ends, err := Ends(client, topic)
		if err != nil {
			return n, next, err
		}
		backlog, err := Backlog(client, topic, next, ends)
		if err != nil {
			return n, next, err
		}
		total += backlog
		progress(n, total)
		if err := caughtUp(ctx); err != nil {
			return n, next, err
		}
		read := int64(0)
		reached, err := ReadPartitions(ctx, client, topic, next, ends, batch, func(ctx context.Context, p int32, msgs []*sarama.ConsumerMessage) error {
			if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return apply(ctx, tx, p, msgs) }); err != nil {
				return err
			}
			read += int64(len(msgs))
			progress(n+read, total)
			return nil
		})
		n += read
		if err != nil {
			return n, next, err
		}
		next = reached
		if read == 0 {
			break
		}
	}
	return n, next, nil
}
