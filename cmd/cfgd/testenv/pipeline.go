package testenv

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/pipeline"
)

// Quiet is a logger that drops everything, for tests that do not read logs.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Pipeline runs the real write-to-read path for a test, built by
// pipeline.New as cfgd serve builds it, feeding ps from the test's broker.
// It stops when t ends. wake, when not nil, is the pool's
// store.CommitSignal, as in cfgd serve; without it the relay polls every
// 20ms.
func Pipeline(t testing.TB, pool *pgxpool.Pool, wake <-chan struct{}, c kafka.Config, reg *events.Registry, ps ...*projections.Projection) {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Bus: c, Relay: outbox.Config{Idle: 20 * time.Millisecond}, Wake: wake, Signer: Signer(t)}, pool, reg, Quiet(), ps...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("pipeline: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// SigningPublisher signs every message body before handing it to pub, as
// the relay does when it has a signer.
func SigningPublisher(pub outbox.Publisher, s *events.Signer) outbox.Publisher {
	return signing{pub: pub, s: s}
}

type signing struct {
	pub outbox.Publisher
	s   *events.Signer
}

func (p signing) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		m.Metadata.Set(events.HeaderSignature, p.s.Sign(m.Payload))
	}
	return p.pub.Publish(topic, msgs...)
}
