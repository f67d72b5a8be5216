package testenv

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/relay"
	"github.com/cfgd/cfgd/projections"
)

// Quiet is a logger that drops everything, for tests that do not read logs.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Pipeline runs the real write-to-read path for a test: the outbox relay
// from pool to the test's broker, and the projection runner feeding ps. Both
// stop when t ends. The events topic is created first. wake, when not nil,
// is the pool's store.CommitSignal, as in cfgd serve; without it the relay
// polls every 20ms.
func Pipeline(t testing.TB, pool *pgxpool.Pool, wake <-chan struct{}, c bus.Config, reg *events.Registry, ps ...*projections.Projection) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := bus.EnsureTopics(ctx, c, Quiet(), bus.TopicEvents); err != nil {
		cancel()
		t.Fatal(err)
	}
	pub, err := bus.NewPublisher(c)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rl, err := relay.New(relay.Config{Topic: c.Topic(bus.TopicEvents), Idle: 20 * time.Millisecond, Wake: wake, Signer: Signer(t)}, pool, pub, Quiet())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	runner, err := projections.NewRunner(pool, reg, c, Quiet(), nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = rl.Run(ctx); done <- struct{}{} }()
	go func() {
		if len(ps) > 0 {
			_ = runner.Run(ctx, ps...)
		}
		done <- struct{}{}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		_ = pub.Close()
	})
}
