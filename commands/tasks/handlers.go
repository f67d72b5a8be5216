package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
)

// Task types shipped with cfgd, to watch work flow through the queues.
const (
	// TypeSleep sleeps {"ms": N} milliseconds (default 1000, at most 10
	// minutes) and succeeds.
	TypeSleep = "demo:sleep"
	// TypeEcho logs its payload and succeeds.
	TypeEcho = "demo:echo"
	// TypeFail fails every attempt with {"message": "..."}, so retries
	// and the failed count can be watched.
	TypeFail = "demo:fail"
)

// TaskTypes lists the types Handlers serves.
func TaskTypes() []string { return []string{TypeSleep, TypeEcho, TypeFail} }

// ValidatePayload checks a payload for typ before it is enqueued, so a bad
// one is refused at once instead of failing in a worker.
func ValidatePayload(typ string, payload []byte) error {
	switch typ {
	case TypeSleep:
		_, err := sleepFor(payload)
		return err
	case TypeEcho, TypeFail:
		if len(payload) > 0 && !json.Valid(payload) {
			return errors.New("payload must be JSON")
		}
		return nil
	}
	return fmt.Errorf("unknown task type %q (known: %v)", typ, TaskTypes())
}

func sleepFor(payload []byte) (time.Duration, error) {
	var p struct {
		MS *int `json:"ms"`
	}
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &p); err != nil {
			return 0, errors.New(`payload must be {"ms": <milliseconds>}`)
		}
	}
	if p.MS == nil {
		return time.Second, nil
	}
	if *p.MS < 0 || *p.MS > 600_000 {
		return 0, errors.New("ms must be from 0 to 600000")
	}
	return time.Duration(*p.MS) * time.Millisecond, nil
}

// Handlers is the mux of cfgd's task types.
func Handlers(log *slog.Logger) *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.HandleFunc(TypeSleep, func(ctx context.Context, t *asynq.Task) error {
		d, err := sleepFor(t.Payload())
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
	mux.HandleFunc(TypeEcho, func(ctx context.Context, t *asynq.Task) error {
		log.InfoContext(ctx, "demo:echo", "payload", string(t.Payload()))
		return nil
	})
	mux.HandleFunc(TypeFail, func(_ context.Context, t *asynq.Task) error {
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
