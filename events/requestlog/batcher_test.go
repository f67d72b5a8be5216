package requestlog_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events/requestlog"
)

// sink records the batches it is given, failing while fail is set.
type sink struct {
	mu      sync.Mutex
	batches [][]requestlog.Event
	fail    bool
	hang    bool
}

func (s *sink) send(ctx context.Context, events []requestlog.Event) error {
	s.mu.Lock()
	fail, hang := s.fail, s.hang
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("sink down")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, events)
	return nil
}

func someEvents(n int) []requestlog.Event {
	out := make([]requestlog.Event, n)
	for i := range out {
		out[i] = requestlog.Event{ServiceName: "s", MethodName: "m", Status: requestlog.StatusSuccess}
	}
	return out
}

func TestBatcher(t *testing.T) {
	t.Parallel()
	cfg := requestlog.BatcherConfig{QueueSize: 100, BatchSize: 30, FlushInterval: 10 * time.Millisecond, SendTimeout: 100 * time.Millisecond}
	tests := []struct {
		name          string
		fail, hang    bool
		report        int
		sent, dropped int64
	}{
		{"delivers in bounded batches", false, false, 100, 100, 0},
		{"queue full drops the excess", false, false, 250, 100, 150},
		{"failing sink drops", true, false, 70, 0, 70},
		{"hanging sink drops after the send timeout", false, true, 70, 0, 70},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &sink{fail: tc.fail, hang: tc.hang}
			b, err := requestlog.NewBatcher(cfg, s.send, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			// Reported before Run starts: only the queue holds them.
			start := time.Now()
			for range tc.report {
				b.Report(context.Background(), someEvents(1))
			}
			if took := time.Since(start); took > time.Second {
				t.Fatalf("Report blocked for %s", took)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			deadline := time.Now().Add(5 * time.Second)
			for b.Sent()+b.Dropped() < int64(tc.report) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if b.Sent() != tc.sent || b.Dropped() != tc.dropped {
				t.Fatalf("sent %d dropped %d, want %d and %d", b.Sent(), b.Dropped(), tc.sent, tc.dropped)
			}
			for _, batch := range s.batches {
				if len(batch) > cfg.BatchSize {
					t.Errorf("batch of %d > %d", len(batch), cfg.BatchSize)
				}
			}
			// After Run, reports are dropped, not queued forever.
			b.Report(context.Background(), someEvents(3))
			if b.Dropped() != tc.dropped+3 {
				t.Errorf("after Run: dropped %d", b.Dropped())
			}
		})
	}
}

// Cancelling Run flushes what is queued.
func TestBatcherFlushesOnStop(t *testing.T) {
	t.Parallel()
	s := &sink{}
	b, err := requestlog.NewBatcher(requestlog.BatcherConfig{QueueSize: 1000, BatchSize: 500, FlushInterval: time.Hour, SendTimeout: time.Second},
		s.send, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Report(ctx, someEvents(7))
	cancel()
	if err := b.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Sent() != 7 || len(s.batches) != 1 {
		t.Fatalf("sent %d in %d batches", b.Sent(), len(s.batches))
	}
}

func TestFromCall(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		call requestlog.Call
		want requestlog.Event
	}{
		{"ok", requestlog.Call{FullMethod: "/a.v1.Svc/Get", Start: start, End: start.Add(42 * time.Millisecond), Peer: "[::ffff:10.0.0.1]:5000", RequestID: "r"},
			requestlog.Event{RequestID: "r", ServiceName: "a.v1.Svc", MethodName: "Get", Status: "success", GRPCStatusCode: "OK", DurationMS: 42, CreatedAt: start, ClientIP: "10.0.0.1"}},
		{"deadline", requestlog.Call{FullMethod: "/a.Svc/Put", Code: 4, Message: "slow", Start: start, End: start, Peer: "[::1]:1"},
			requestlog.Event{ServiceName: "a.Svc", MethodName: "Put", Status: "timeout", GRPCStatusCode: "DEADLINE_EXCEEDED", ErrorMessage: "slow", CreatedAt: start, ClientIP: "::1"}},
		{"cancelled, clock backwards, no peer", requestlog.Call{FullMethod: "/a.Svc/Put", Code: 1, Start: start, End: start.Add(-time.Second), Peer: "pipe"},
			requestlog.Event{ServiceName: "a.Svc", MethodName: "Put", Status: "cancelled", GRPCStatusCode: "CANCELLED", CreatedAt: start}},
		{"error", requestlog.Call{FullMethod: "/a.Svc/Put", Code: 13, Message: "boom", Start: start, End: start},
			requestlog.Event{ServiceName: "a.Svc", MethodName: "Put", Status: "error", GRPCStatusCode: "INTERNAL", ErrorMessage: "boom", CreatedAt: start}},
		// Metadata is any bytes: each field is made valid on its own, so
		// the event cannot spoil the record it is packed in (issue #20).
		{"non-UTF-8 request id", requestlog.Call{FullMethod: "/a.Svc/\xffPut", Start: start, End: start, RequestID: "r-\xff\xfe"},
			requestlog.Event{RequestID: "r-\uFFFD", ServiceName: "a.Svc", MethodName: "\uFFFDPut", Status: "success", GRPCStatusCode: "OK", CreatedAt: start}},
	}
	for _, tc := range tests {
		got := requestlog.FromCall(tc.call)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if errs := requestlog.Check(0, got); len(errs) > 0 {
			t.Errorf("%s: event fails Check: %v", tc.name, errs)
		}
	}
	// Over-long text is cut to its limit on a rune boundary.
	long := requestlog.FromCall(requestlog.Call{FullMethod: "/a.Svc/M", Code: 2, Message: string(make([]byte, 4095)) + "é", Start: start, End: start})
	if len(long.ErrorMessage) != 4095 || len(requestlog.Check(0, long)) > 0 {
		t.Errorf("long message cut to %d bytes", len(long.ErrorMessage))
	}
}
