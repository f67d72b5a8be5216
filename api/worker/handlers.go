package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

// Handlers is the mux of cfgd's task types.
func Handlers(log *slog.Logger) *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.HandleFunc(taskqueues.TypeSleep, func(ctx context.Context, t *asynq.Task) error {
		d, err := taskqueues.SleepDuration(t.Payload())
		if err != nil {
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	mux.HandleFunc(taskqueues.TypeEcho, func(ctx context.Context, t *asynq.Task) error {
		log.InfoContext(ctx, "demo:echo", "payload", string(t.Payload()))
		return nil
	})
	mux.HandleFunc(taskqueues.TypeFail, func(_ context.Context, t *asynq.Task) error {
		var p struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(t.Payload(), &p)
		if p.Message == "" {
			p.Message = "demo failure"
		}
		return errors.New(p.Message)
	})
	return mux
}
