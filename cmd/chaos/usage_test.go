package main

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// The usage bounds: answered calls are the lower bound, minus those a serve
// answered within the window before it was killed (longer after a broker
// fault); unanswered calls widen the upper bound only.
func TestUsageBounds(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	serve0 := &component{name: "serve-0", kills: []time.Time{at(100)}}
	serve1 := &component{name: "serve-1"}
	broker := &component{name: "broker", spans: [][2]time.Time{{at(60), at(95)}}}
	sup := &supervisor{comps: []*component{serve0, serve1, broker}}
	lost := sup.lostWindows()
	if w := lost[0]; len(w) != 1 || !w[0][0].Equal(at(52)) || !w[0][1].Equal(at(100)) {
		t.Fatalf("serve-0's window: %v, want from the broker fault's start less 8 s (52 s) to the kill (100 s)", w)
	}
	if len(lost[1]) != 0 {
		t.Fatalf("serve-1 was never killed: %v", lost[1])
	}
	for _, tc := range []struct {
		name      string
		calls     []keyCall
		unknown   int
		low, high int64
	}{
		{"no kill, nothing unanswered: exact", []keyCall{{1, at(10)}, {1, at(99)}, {0, at(10)}}, 0, 3, 3},
		{"answered by serve-0 just before its kill: may be lost", []keyCall{{0, at(99)}, {0, at(53)}, {0, at(51)}, {0, at(101)}}, 0, 2, 4},
		{"unanswered calls raise the upper bound only", []keyCall{{1, at(10)}}, 5, 1, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := boundsOf(&keyUses{answered: tc.calls, unknown: tc.unknown}, lost)
			if b.low() != tc.low || b.high() != tc.high {
				t.Fatalf("bounds [%d, %d], want [%d, %d]", b.low(), b.high(), tc.low, tc.high)
			}
		})
	}
}

func TestUseOutcomes(t *testing.T) {
	for _, tc := range []struct {
		code int
		err  error
		want useOutcome
	}{
		{http.StatusAccepted, nil, useAnswered},
		{http.StatusConflict, nil, useAnswered},
		{http.StatusTooManyRequests, nil, useAnswered},
		{http.StatusUnauthorized, nil, useRefused},
		{http.StatusServiceUnavailable, nil, useUnknown},
		{http.StatusInternalServerError, nil, useUnknown},
		{0, http.ErrHandlerTimeout, useUnknown},
	} {
		if got := httpUse(tc.code, tc.err); got != tc.want {
			t.Errorf("HTTP %d %v: %d, want %d", tc.code, tc.err, got, tc.want)
		}
	}
	for c, want := range map[codes.Code]useOutcome{codes.OK: useAnswered, codes.InvalidArgument: useAnswered,
		codes.Unauthenticated: useRefused, codes.Unavailable: useUnknown, codes.DeadlineExceeded: useUnknown} {
		if got := grpcUse(c); got != want {
			t.Errorf("gRPC %v: %d, want %d", c, got, want)
		}
	}
}
