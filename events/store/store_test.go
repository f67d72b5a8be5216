package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
)

type noted struct {
	Text string `json:"text"`
}

func (noted) EventType() string { return "test.noted" }

func env(t *testing.T, stream, text string) events.Envelope {
	t.Helper()
	e, err := events.New(stream, noted{Text: text}, events.Metadata{CorrelationID: "c-1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAppendAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)

	got, err := store.Append(ctx, db, "s-1", events.NoStream, env(t, "s-1", "a"), env(t, "s-1", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Version != 1 || got[1].Version != 2 || got[0].Position == 0 || got[1].Position <= got[0].Position {
		t.Fatalf("versions/positions not assigned: %+v", got)
	}
	if _, err := store.Append(ctx, db, "s-1", 2, env(t, "s-1", "c")); err != nil {
		t.Fatal(err)
	}
	loaded, err := store.Load(ctx, db, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 3 {
		t.Fatalf("loaded %d events, want 3", len(loaded))
	}
	reg, _ := events.NewRegistry(noted{})
	for i, want := range []string{"a", "b", "c"} {
		ev, err := reg.Decode(loaded[i])
		if err != nil {
			t.Fatal(err)
		}
		if ev.(*noted).Text != want || loaded[i].Version != int64(i+1) || loaded[i].Metadata.CorrelationID != "c-1" {
			t.Fatalf("event %d: %+v", i, loaded[i])
		}
	}
}

func TestAppendConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	if _, err := store.Append(ctx, db, "s", events.NoStream, env(t, "s", "a")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		expected int64
	}{
		{"stream already exists", events.NoStream},
		{"stale version", 0},
		{"future version", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := store.Append(ctx, db, "s", tc.expected, env(t, "s", "x"))
			var c *store.ConflictError
			if !errors.As(err, &c) || c.Actual != 1 {
				t.Fatalf("want conflict at version 1, got %v", err)
			}
		})
	}
}

// Two transactions that loaded the same version race; exactly one wins and
// the other gets a typed conflict, never a silent overwrite.
func TestConcurrentAppendsOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	const racers = 8
	errs := make(chan error, racers)
	start := make(chan struct{})
	for i := range racers {
		go func() {
			<-start
			tx, err := db.Begin(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer tx.Rollback(ctx)
			if _, err := store.Append(ctx, tx, "race", events.NoStream, env(t, "race", fmt.Sprint(i))); err != nil {
				errs <- err
				return
			}
			errs <- tx.Commit(ctx)
		}()
	}
	close(start)
	wins := 0
	for range racers {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case store.IsConflict(err):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	loaded, _ := store.Load(ctx, db, "race")
	if wins != 1 || len(loaded) != 1 {
		t.Fatalf("wins=%d events=%d, want 1 and 1", wins, len(loaded))
	}
}
