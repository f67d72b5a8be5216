package taskqueues

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/events/tasks"
)

// ErrUnknownQueue is a queue that is not configured.
var ErrUnknownQueue = errors.New("unknown queue")

// Enqueuer puts tasks on the configured queues and records them as
// Recorder receives the lifecycle record of each enqueued task (the
// worker's lifecycle emitter in cfgd).
type Recorder interface {
	Emit(ctx context.Context, rec tasks.Lifecycle)
}

// enqueued.
type Enqueuer struct {
	cfg    Config
	client *asynq.Client
	rec    Recorder
	now    func() time.Time
}

// NewEnqueuer returns an enqueuer over rdb (not closed by Close).
func NewEnqueuer(cfg Config, rdb redis.UniversalClient, rec Recorder) *Enqueuer {
	return &Enqueuer{cfg: cfg, client: asynq.NewClientFromRedisClient(rdb), rec: rec, now: time.Now}
}

// Enqueue validates and enqueues one task and returns its id.
func (e *Enqueuer) Enqueue(ctx context.Context, queue, typ string, payload []byte) (string, error) {
	if !e.cfg.HasQueue(queue) {
		return "", fmt.Errorf("%w %q (configured: %v)", ErrUnknownQueue, queue, e.cfg.QueueNames())
	}
	if err := ValidatePayload(typ, payload); err != nil {
		return "", err
	}
	info, err := e.client.EnqueueContext(ctx, asynq.NewTask(typ, payload), asynq.Queue(queue), asynq.MaxRetry(e.cfg.MaxRetries), asynq.Retention(e.cfg.Retention))
	if err != nil {
		return "", fmt.Errorf("enqueue %s on %s: %w", typ, queue, err)
	}
	e.rec.Emit(ctx, tasks.Lifecycle{TaskID: info.ID, Queue: queue, Type: typ, Step: tasks.StepEnqueued, At: e.now().UTC()})
	return info.ID, nil
}

// Close releases the client.
func (e *Enqueuer) Close() error { return e.client.Close() }
