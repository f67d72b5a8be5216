package replay

import (
	"context"

	"github.com/cfgd/cfgd/events/kafka"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
)

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
func RebuildFromTopic(ctx context.Context, r *kafka.Reader, conn *pgx.Conn, topic string, batch int,
	caughtUp func(context.Context) error, progress func(read, total int64),
	apply func(ctx context.Context, tx pgx.Tx, partition int32, msgs []*sarama.ConsumerMessage) error) (int64, map[int32]int64, error) {
	if err := r.Complete(topic); err != nil {
		return 0, nil, err
	}
	var n, total int64
	var next map[int32]int64
	for range rebuildPasses {
		ends, err := r.Ends(topic)
		if err != nil {
			return n, next, err
		}
		backlog, err := r.Backlog(topic, next, ends)
		if err != nil {
			return n, next, err
		}
		total += backlog
		progress(n, total)
		if err := caughtUp(ctx); err != nil {
			return n, next, err
		}
		read := int64(0)
		reached, err := r.Read(ctx, topic, next, ends, batch, func(ctx context.Context, p int32, msgs []*sarama.ConsumerMessage) error {
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
