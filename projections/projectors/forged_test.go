package projectors_test

import (
	"context"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/readmodels/checkpoints"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/projections"
)

// Someone who can reach the broker produces a staff user.registered
// straight to the topic, unsigned or signed with a key of their own: the
// users read model never holds it (so HTTP Basic cannot accept it), and it
// lands in the dead-letter topic.
func TestForgedEventsNeverReachTheUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := testenv.Kafka(t, 1)
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	reg, err := events.NewRegistry(identity.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	signer := testenv.Signer(t)
	attacker, err := events.NewSigner([]byte("an-attacker-key-that-is-not-cfgds-own-0123"))
	if err != nil {
		t.Fatal(err)
	}

	registered := func(id int64, email string, staff bool) events.Envelope {
		env, err := events.New(identity.UserStream(id), identity.UserRegistered{
			UserID: id, Email: email, IsActive: true, IsStaff: staff, IsSuperuser: staff,
			PasswordHash: "$argon2id$v=19$m=65536,t=1,p=2$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNo", JoinedAt: time.Now(), Via: "otp",
		}, events.Metadata{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		env.Version = 1
		return env
	}
	send := func(p outbox.Publisher, env events.Envelope) {
		m, err := outbox.ToMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(c.Topic(kafka.TopicEvents), m); err != nil {
			t.Fatal(err)
		}
	}
	send(pub, registered(900, "forged-unsigned@example.com", true))
	send(testenv.SigningPublisher(pub, attacker), registered(901, "forged-other-key@example.com", true))
	send(testenv.SigningPublisher(pub, signer), registered(1, "real@example.com", false))

	runner, err := projections.NewRunner(projections.Config{Bus: c, Registry: reg, Signer: signer}, pool, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx, projectors.IdentityGroup()) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := checkpoints.Wait(wctx, pool, projectors.UsersName, identity.UserStream(1), 1); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT email FROM users ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	emails, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(emails) != 1 || emails[0] != "real@example.com" {
		t.Fatalf("users %v (%v), want only the signed one", emails, err)
	}
	var checkpoints int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM projection_checkpoints WHERE stream_id IN ('user-900', 'user-901')`).Scan(&checkpoints); err != nil || checkpoints != 0 {
		t.Fatalf("forged streams moved %d checkpoints (%v)", checkpoints, err)
	}
	dls, err := projections.ReadDeadLetters(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 {
		t.Fatalf("dead letters %+v, want the two forged events", dls)
	}
	for i, d := range dls {
		if d.Reason != projections.ReasonBadSignature || d.Projection != projectors.IdentityGroupName ||
			d.Stream != identity.UserStream(int64(900+i)) || d.Type != "user.registered" {
			t.Fatalf("dead letter %d: %+v", i, d)
		}
	}
}
