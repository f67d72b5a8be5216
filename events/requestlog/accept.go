package requestlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// Accepter is the one accept path of every edge that takes other
// servers' request logs (HTTP ingest, cfgd.ingest.v1, the OTLP
// receiver): validate a batch, produce what is valid, and say what was
// refused and why.
type Accepter struct {
	// Produce takes the valid events to Kafka (Producer.Produce).
	Produce Send
	Now     func() time.Time
	// Window bounds created_at (WindowFor the sink's retention).
	Window Window
	// Keys remembers the outcomes of calls sent with an idempotency key
	// (Once); nil: transports ignore the key.
	Keys KeyStore
	// Log takes what goes wrong with Keys after a call's events are
	// stored (nil: slog.Default()).
	Log *slog.Logger
}

// Outcome is what Accept did with a batch.
type Outcome struct {
	Accepted int          `json:"accepted"`
	Rejected int          `json:"rejected"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// MaxOutcomeErrors bounds the problems an Outcome lists.
const MaxOutcomeErrors = 1000

// Accept validates batch and produces its valid events. Events of batch
// already refused by the caller's decoder (a wrong JSON type, say) are
// named in refused, by their index in batch (their entry in batch is
// ignored); they count as rejected.
//
// When nothing of the batch is stored because every event was refused,
// the error is an errcode Invalid naming "events[i].field" for each
// problem, so a client that retries on 4xx never doubles a count: a batch
// partly stored is no error, its Outcome lists what was refused. When
// Kafka cannot take the events, the error is errcode Unavailable (some of
// them may have been stored all the same).
func (a *Accepter) Accept(ctx context.Context, batch []Event, refused []FieldError) (Outcome, error) {
	skip := make(map[int]bool, len(refused))
	for _, r := range refused {
		skip[r.Index] = true
	}
	valid, at, problems := validate(batch, skip, a.now(), a.Window)
	problems = mergeProblems(refused, problems)
	out := Outcome{Accepted: len(valid), Rejected: len(batch) - len(valid)}
	out.Errors = problems[:min(len(problems), MaxOutcomeErrors)]
	if err := out.Err(); err != nil {
		return out, err
	}
	if err := a.produce(ctx, valid, out, at); err != nil {
		return Outcome{}, err
	}
	return out, nil
}

// Err is the error of an outcome of which nothing was stored because
// every event was refused (Refusal of its errors), else nil.
func (o Outcome) Err() error {
	if o.Accepted == 0 && o.Rejected > 0 {
		return Refusal(o.Errors)
	}
	return nil
}

// produce takes valid events (at their indexes at of the call) to Kafka
// for a call that answers out once they are stored: errcode Unavailable
// when Kafka cannot take them (some of them may have been stored all the
// same: then it wraps an *unsettled, for Once).
func (a *Accepter) produce(ctx context.Context, valid []Event, out Outcome, at []int) error {
	if err := a.Produce(ctx, valid); err != nil {
		if errors.Is(err, ErrUnavailable) {
			if d, ok := errors.AsType[InDoubt](err); ok {
				err = &unsettled{doubt: d, out: out, at: at}
			}
			return &errcode.Error{Code: errcode.Unavailable, Message: "the request-log queue is unavailable, try again shortly", RetryAfter: time.Second, Err: err}
		}
		return fmt.Errorf("request-log ingest: %w", err)
	}
	return nil
}

func (a *Accepter) now() time.Time {
	if a.Now != nil {
		return a.Now().UTC()
	}
	return time.Now().UTC()
}

// Refusal is the error of a batch of which nothing was stored: each
// problem as the field "events[i].field" of errcode's one field-error
// shape.
func Refusal(problems []FieldError) *errcode.Error {
	fields := make(map[string]string, len(problems))
	for _, p := range problems {
		k := "events[" + strconv.Itoa(p.Index) + "]"
		if p.Field != "" {
			k += "." + p.Field
		}
		if _, dup := fields[k]; !dup {
			fields[k] = p.Message
		}
	}
	return &errcode.Error{Code: errcode.Invalid, Message: "no event of the batch was accepted", Fields: fields}
}

// mergeProblems puts the decoder's refusals and the validator's problems
// in index order (both are sorted by index already).
func mergeProblems(a, b []FieldError) []FieldError {
	if len(a) == 0 {
		return b
	}
	out := make([]FieldError, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Index <= b[0].Index {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}
