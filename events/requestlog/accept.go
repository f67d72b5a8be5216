package requestlog

import (
	"context"
	"errors"
	"fmt"
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
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	skip := make(map[int]bool, len(refused))
	for _, r := range refused {
		skip[r.Index] = true
	}
	valid, problems := validate(batch, skip, now().UTC(), a.Window)
	problems = mergeProblems(refused, problems)
	out := Outcome{Accepted: len(valid), Rejected: len(batch) - len(valid)}
	out.Errors = problems[:min(len(problems), MaxOutcomeErrors)]
	if len(valid) == 0 && out.Rejected > 0 {
		return out, Refusal(out.Errors)
	}
	if err := a.Produce(ctx, valid); err != nil {
		if errors.Is(err, ErrUnavailable) {
			return Outcome{}, &errcode.Error{Code: errcode.Unavailable, Message: "the request-log queue is unavailable, try again shortly", RetryAfter: time.Second, Err: err}
		}
		return Outcome{}, fmt.Errorf("request-log ingest: %w", err)
	}
	return out, nil
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
