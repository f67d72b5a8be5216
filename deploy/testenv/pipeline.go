package testenv

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/events/relay"
	"github.com/cfgd/cfgd/projections"
)

// Quiet is a logger that drops everything, for tests that do not read logs.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Signer returns an event signer with a fresh random key.
func Signer(t testing.TB) *events.Signer {
	t.Helper()
	key := make([]byte, events.MinSigningKeyBytes)
	_, _ = rand.Read(key)
	s, err := events.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SigningPublisher signs every message body before handing it to pub, as
// the relay does when it has a signer.
func SigningPublisher(pub relay.Publisher, s *events.Signer) relay.Publisher {
	return signing{pub: pub, s: s}
}

type signing struct {
	pub relay.Publisher
	s   *events.Signer
}

func (p signing) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		m.Metadata.Set(events.HeaderSignature, p.s.Sign(m.Payload))
	}
	return p.pub.Publish(topic, msgs...)
}

// Pipeline runs the real write-to-read path for a test: the outbox relay
// from pool to the test's broker, signing every event, and the projection
// runner feeding ps (one consumer group each). Both stop when t ends. The
// events topic is created first. wake, when not nil, is the pool's
// store.CommitSignal, as in cfgd serve; without it the relay polls every
// 20ms.
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
	signer := Signer(t)
	rl, err := relay.New(relay.Config{Topic: c.Topic(bus.TopicEvents), Idle: 20 * time.Millisecond, Wake: wake}, pool, SigningPublisher(pub, signer), Quiet())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	runner, err := projections.NewRunner(projections.Config{Bus: c, Registry: reg, Signer: signer}, pool, Quiet())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = rl.Run(ctx); done <- struct{}{} }()
	go func() {
		_ = runner.Run(ctx, projections.Each(ps...)...)
		done <- struct{}{}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		_ = pub.Close()
	})
}
