package requestlog

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// A keyed call that arrives in pieces is checked piece by piece: only its
// valid events are held, its errors index the whole call and stop at
// MaxKeyedErrors, and the piece that passes MaxKeyedBytes or
// MaxBatchEvents is refused at once (issue 28 point 3).
func TestPendingChecksEachPieceAsItArrives(t *testing.T) {
	var produced []Event
	a := &Accepter{Now: time.Now, Produce: func(_ context.Context, e []Event) error { produced = append(produced, e...); return nil }}
	good := Event{ServiceName: "s", MethodName: "m", Status: StatusSuccess}
	bad := Event{ServiceName: "s", MethodName: "m", Status: "bogus"}
	p := a.Pending()
	pieces := [][]Event{{good, bad}, {bad, good, bad}}
	for range 30 {
		pieces = append(pieces, []Event{bad, bad})
	}
	for _, piece := range pieces {
		if err := p.Add(piece, 100); err != nil {
			t.Fatal(err)
		}
	}
	if len(p.valid) != 2 || !slices.Equal(p.at, []int{0, 3}) || len(p.out.Errors) != MaxKeyedErrors || p.out.Errors[1].Index != 2 || p.out.Errors[2].Index != 4 {
		t.Fatalf("held %d valid, %d errors: %+v", len(p.valid), len(p.out.Errors), p.out.Errors[:3])
	}
	var e *errcode.Error
	if err := p.Add([]Event{{ErrorMessage: strings.Repeat("x", MaxKeyedBytes)}}, MaxKeyedBytes); !errors.As(err, &e) || e.Code != errcode.TooLarge {
		t.Fatalf("past the bytes: %v", err)
	}
	if err := p.Add(make([]Event, MaxBatchEvents), 10); !errors.As(err, &e) || e.Code != errcode.TooLarge {
		t.Fatalf("past the events: %v", err)
	}
	out, err := p.Accept(context.Background())
	if err != nil || out.Accepted != 2 || out.Rejected != 63 || len(produced) != 2 {
		t.Fatalf("%+v %v, %d produced", out, err, len(produced))
	}
}

// A keyed call of which Kafka stored only some events after answering
// Unavailable is finished with the others as per-event errors, in index
// order among its refusals and within MaxKeyedErrors (chaos finding 2).
func TestSettledReportsTheEventsNotStored(t *testing.T) {
	refused := FieldError{Index: 1, Field: "status", Message: "bad"}
	u := &unsettled{out: Outcome{Accepted: 3, Rejected: 1, Errors: []FieldError{refused}}, at: []int{0, 2, 3}}
	for _, tc := range []struct {
		name string
		lost []int
		want Outcome
	}{
		{"all stored", nil, u.out},
		{"some stored", []int{0, 2}, Outcome{Accepted: 1, Rejected: 3, Errors: []FieldError{{Index: 0, Message: NotStored}, refused, {Index: 3, Message: NotStored}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := u.settled(tc.lost)
			if got.Accepted != tc.want.Accepted || got.Rejected != tc.want.Rejected || !slices.Equal(got.Errors, tc.want.Errors) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	many := &unsettled{out: Outcome{Accepted: 2 * MaxKeyedErrors}, at: make([]int, 2*MaxKeyedErrors)}
	lost := make([]int, MaxKeyedErrors+1)
	for i := range many.at {
		many.at[i] = i
	}
	for i := range lost {
		lost[i] = i
	}
	if got := many.settled(lost); len(got.Errors) != MaxKeyedErrors || got.Rejected != MaxKeyedErrors+1 {
		t.Fatalf("%d errors, %d rejected", len(got.Errors), got.Rejected)
	}
}
