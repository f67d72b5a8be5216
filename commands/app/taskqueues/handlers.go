package taskqueues

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
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

// TaskTypes lists the types the worker serves (api/worker.Handlers).
func TaskTypes() []string { return []string{TypeSleep, TypeEcho, TypeFail} }

// ValidatePayload checks a payload for typ before it is enqueued, so a bad
// one is refused at once instead of failing in a worker.
func ValidatePayload(typ string, payload []byte) error {
	switch typ {
	case TypeSleep:
		_, err := SleepDuration(payload)
		return err
	case TypeEcho, TypeFail:
		if len(payload) > 0 && !json.Valid(payload) {
			return errors.New("payload must be JSON")
		}
		return nil
	}
	return fmt.Errorf("unknown task type %q (known: %v)", typ, TaskTypes())
}

// SleepDuration is how long a TypeSleep task with payload sleeps.
func SleepDuration(payload []byte) (time.Duration, error) {
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
