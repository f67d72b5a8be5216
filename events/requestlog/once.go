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

// The idempotency protocol of every ingest transport, written once beside
// the accept path: a call sent with an idempotency key is checked before
// its body is read (Admit), claimed by the hash of its body, accepted,
// and its Outcome (not a transport's answer) remembered, so a retry on
// either transport gets the same outcome rendered by its own transport
// and counts nothing again.

// KeyStore remembers the outcomes of calls by (caller, key) for a while
// (readmodels/requestlogview.Idempotency, over Postgres).
type KeyStore interface {
	// Room refuses (errcode RateLimited, with RetryAfter) a new key of a
	// caller that holds as much as it may of remembered outcomes; a key
	// it holds already passes (its call may be a replay).
	Room(ctx context.Context, caller, key string) error
	// Claim claims key for a call whose body hashes to hash: nil, nil when
	// the call is the first with the key (run it, then Finish or
	// Release); the remembered outcome when a call with the key and this
	// body ended; errcode Conflict when the key was used with another
	// body or its first call still runs, RateLimited as Room.
	Claim(ctx context.Context, caller, key string, hash []byte) (*Outcome, error)
	// Finish remembers the outcome of the call that claimed key.
	Finish(ctx context.Context, caller, key string, out Outcome) error
	// Release gives key up after its call failed in a way a retry may fix.
	Release(ctx context.Context, caller, key string) error
}

// KeyCaller and UserCaller name the scope of an idempotency key: the API
// key, or the user, that sent the call, on either transport.
func KeyCaller(id int64) string  { return "key:" + strconv.FormatInt(id, 10) }
func UserCaller(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

// MaxKey bounds an idempotency key, in bytes.
const MaxKey = 255

// MaxKeyedErrors bounds the per-event errors of the outcome of a call
// with an idempotency key: remembered for a day, the outcome keeps only
// the first ones, and its first answer lists the same as its replays.
const MaxKeyedErrors = 50

// MaxKeyedBytes bounds what a call with an idempotency key may send: it
// is accepted as one batch, so it is held whole until it ends (the gRPC
// stream's messages, as the HTTP body is bounded by the same 8 MiB).
const MaxKeyedBytes = 8 << 20

// CheckKey returns the field error of a malformed key.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKey {
		return errcode.Field("Idempotency-Key", fmt.Sprintf("must be 1 to %d bytes", MaxKey))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return errcode.Field("Idempotency-Key", "must be printable ASCII without spaces")
		}
	}
	return nil
}

// Admit checks what can be checked of a keyed call before its body is
// read: the key's form, and the caller's room in the store.
func (a *Accepter) Admit(ctx context.Context, caller, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return a.Keys.Room(ctx, caller, key)
}

// SettleWithin bounds how long a keyed call whose produce timed out holds
// its key in the background for Kafka's final answer on its events. It
// covers the producer's own bound (requestlogkafka gives a record up
// at most 78 s after at the default 1 s Timeout: 11 tries, each waiting 5
// times the Timeout for an answer, and 23 s of backoff between them) and
// stays below the time after which the store takes a claim without
// outcome for abandoned (requestlogview.AbandonedClaim, two minutes: a
// test checks it), so no other call runs with the key while the events
// may still land.
const SettleWithin = 90 * time.Second

// Once runs the call of caller with key, whose body hashes to hash, at
// most once: run accepts its batch (Accept, or a Pending's Accept). A
// repeat gets the first call's outcome (replayed true). The error is the
// outcome's Err when nothing was stored, else what claiming the key or
// running failed with; a failure other than a refusal releases the key,
// so the retry runs. Errors beyond MaxKeyedErrors are dropped from the
// outcome, first answer and replays alike.
//
// A call whose events Kafka did not acknowledge in time but the producer
// still holds (an InDoubt produce) answers Unavailable and keeps its key
// until their final result is known (a retry meanwhile is refused as in
// progress): then every event stored finishes the key with the call's
// outcome, none releases it, and some finish it with the others as
// per-event errors. So a retry never stores an event a second time.
func (a *Accepter) Once(ctx context.Context, caller, key string, hash []byte, run func(context.Context) (Outcome, error)) (out Outcome, replayed bool, err error) {
	stored, err := a.Keys.Claim(ctx, caller, key, hash)
	if err != nil {
		return Outcome{}, false, err
	}
	if stored != nil {
		return *stored, true, stored.Err()
	}
	out, err = run(ctx)
	if u, ok := errors.AsType[*unsettled](err); ok {
		u.doubt.Settle(SettleWithin, func(lost []int, serr error) { a.settle(ctx, caller, key, u, lost, serr) })
		return Outcome{}, false, err
	}
	var e *errcode.Error
	if err != nil && !(errors.As(err, &e) && e.Code == errcode.Invalid) {
		if rerr := a.Keys.Release(context.WithoutCancel(ctx), caller, key); rerr != nil {
			a.log().WarnContext(ctx, "idempotency key not released", "err", rerr)
		}
		return Outcome{}, false, err
	}
	out.Errors = out.Errors[:min(len(out.Errors), MaxKeyedErrors)]
	// The events are in Kafka: the outcome is stored even if the client
	// has gone, so its retry finds it.
	if ferr := a.Keys.Finish(context.WithoutCancel(ctx), caller, key, out); ferr != nil {
		a.log().WarnContext(ctx, "idempotency outcome not stored", "err", ferr)
	}
	return out, false, out.Err()
}

// unsettled is what a call whose produce is in doubt answers once its
// events have their final result: out when all are stored, the events at
// (their indexes in the call) that are not as per-event errors.
type unsettled struct {
	doubt InDoubt
	out   Outcome
	at    []int
}

func (u *unsettled) Error() string { return u.doubt.Error() }
func (u *unsettled) Unwrap() error { return u.doubt }

// NotStored is the per-event error of an event of a keyed call that Kafka
// did not store after the call was answered Unavailable.
const NotStored = "not stored: the request-log queue did not take it; send it again (under a new Idempotency-Key)"

// settle ends the claim of the call of u (Once) once its events have
// their final result: lost, the indexes of those not stored, or serr
// when that is not known in time.
func (a *Accepter) settle(ctx context.Context, caller, key string, u *unsettled, lost []int, serr error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case serr != nil:
		// Left to expire (the store's abandoned claim): a retry then runs.
		a.log().ErrorContext(ctx, "idempotency key kept: what Kafka stored of its call is not known", "err", serr)
	case len(lost) == len(u.at):
		if err := a.Keys.Release(ctx, caller, key); err != nil {
			a.log().WarnContext(ctx, "idempotency key not released", "err", err)
		}
	default:
		if err := a.Keys.Finish(ctx, caller, key, u.settled(lost)); err != nil {
			a.log().WarnContext(ctx, "idempotency outcome not stored", "err", err)
		}
	}
}

// settled is the outcome of u's call of which the events lost (indexes
// into those produced) were not stored.
func (u *unsettled) settled(lost []int) Outcome {
	out := u.out
	out.Accepted -= len(lost)
	out.Rejected += len(lost)
	errs := make([]FieldError, 0, min(len(out.Errors)+len(lost), MaxKeyedErrors))
	for len(errs) < MaxKeyedErrors && (len(out.Errors) > 0 || len(lost) > 0) {
		if len(lost) == 0 || (len(out.Errors) > 0 && out.Errors[0].Index < u.at[lost[0]]) {
			errs, out.Errors = append(errs, out.Errors[0]), out.Errors[1:]
			continue
		}
		errs, lost = append(errs, FieldError{Index: u.at[lost[0]], Message: NotStored}), lost[1:]
	}
	out.Errors = errs
	return out
}

func (a *Accepter) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}

// Pending is the batch of a keyed call that arrives in pieces (a gRPC
// stream), checked piece by piece as it arrives: it holds only the valid
// events and the first MaxKeyedErrors problems, and refuses a piece that
// takes the call past MaxBatchEvents events or MaxKeyedBytes.
type Pending struct {
	a      *Accepter
	valid  []Event
	at     []int // the index in the call of each valid event
	out    Outcome
	events int
	bytes  int
}

// Pending starts a batch that arrives in pieces.
func (a *Accepter) Pending() *Pending { return &Pending{a: a} }

// Add checks the events of one piece of size bytes, as sent: the valid
// ones are kept, the others counted and their first problems kept. A
// piece over a bound is errcode TooLarge, and the call should end.
func (p *Pending) Add(events []Event, size int) error {
	if p.events+len(events) > MaxBatchEvents {
		return errcode.New(errcode.TooLarge, fmt.Sprintf("events: at most %d per call with an idempotency key", MaxBatchEvents))
	}
	if p.bytes+size > MaxKeyedBytes {
		return errcode.New(errcode.TooLarge, fmt.Sprintf("a call with an idempotency key may send at most %d bytes (%d MiB)", MaxKeyedBytes, MaxKeyedBytes>>20))
	}
	valid, at, problems := validate(events, nil, p.a.now(), p.a.Window)
	for _, fe := range problems {
		if len(p.out.Errors) == MaxKeyedErrors {
			break
		}
		fe.Index += p.events
		p.out.Errors = append(p.out.Errors, fe)
	}
	p.out.Rejected += len(events) - len(valid)
	p.valid = append(p.valid, valid...)
	for _, i := range at {
		p.at = append(p.at, p.events+i)
	}
	p.events += len(events)
	p.bytes += size
	return nil
}

// Accept produces the valid events of the batch, as Accepter.Accept.
func (p *Pending) Accept(ctx context.Context) (Outcome, error) {
	out := p.out
	out.Accepted = len(p.valid)
	if err := out.Err(); err != nil {
		return out, err
	}
	if err := p.a.produce(ctx, p.valid, out, p.at); err != nil {
		return Outcome{}, err
	}
	return out, nil
}
