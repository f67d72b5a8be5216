package projectors_test

import (
	"context"
	"fmt"
	"github.com/cfgd/cfgd/projections/projectors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/projections"
)

// signInMix returns n identity events as the sign-in flows append them:
// sign-ups (code issued and verified, address claimed, user registered,
// often with a source, logged in, session started), returning sign-ins
// (sometimes after a wrong code), profile edits, refreshes and logouts.
func signInMix(tb testing.TB, n int) []events.Envelope {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	versions := map[string]int64{}
	var out []events.Envelope
	add := func(stream string, e events.Event) {
		env, err := events.New(stream, e, events.Metadata{CorrelationID: uuid.NewString()}, time.Now())
		if err != nil {
			tb.Fatal(err)
		}
		versions[stream]++
		env.Version = versions[stream]
		env.Position = int64(len(out) + 1)
		out = append(out, env)
	}
	type session struct {
		id   string
		user int64
	}
	var users []int64
	var sessions []session
	now := time.Now().UTC()
	signIn := func(id int64, email string) {
		code := uuid.NewString()
		add(identity.OTPStream(email), identity.OTPIssued{CodeID: code, Email: email, CodeHMAC: "hmac-" + code, IssuedAt: now, ExpiresAt: now.Add(10 * time.Minute)})
		if rng.IntN(5) == 0 {
			add(identity.OTPStream(email), identity.OTPAttempted{CodeID: code, Attempt: 1})
		}
		s := session{id: uuid.NewString(), user: id}
		add(identity.OTPStream(email), identity.OTPVerified{CodeID: code, Attempt: 1, UserID: id, SessionID: s.id})
		if versions[identity.UserStream(id)] == 0 {
			add(identity.EmailStream(email), identity.EmailClaimed{Email: email, UserID: id})
			add(identity.UserStream(id), identity.UserRegistered{UserID: id, Email: email, IsActive: true, JoinedAt: now, Via: "otp", SignedInAt: &now, SessionID: s.id})
			if rng.IntN(2) == 0 {
				url := fmt.Sprintf("https://example.com/landing/%d", rng.IntN(50))
				add(identity.UserStream(id), identity.SourceLinked{UserID: id, SourceURL: url, SourceName: "example.com", LinkedAt: now})
			}
		}
		add(identity.UserStream(id), identity.LoggedIn{UserID: id, SessionID: s.id, At: now, Method: "otp"})
		add(identity.SessionStream(s.id), identity.SessionStarted{SessionID: s.id, UserID: id, Kind: "api", RefreshID: uuid.NewString(), UserVersion: versions[identity.UserStream(id)], StartedAt: now, ExpiresAt: now.Add(30 * 24 * time.Hour)})
		sessions = append(sessions, s)
	}
	for len(out) < n {
		switch r := rng.IntN(10); {
		case r < 4 || len(users) == 0:
			id := int64(len(users) + 1)
			users = append(users, id)
			signIn(id, fmt.Sprintf("user%d@example.com", id))
		case r < 7:
			id := users[rng.IntN(len(users))]
			signIn(id, fmt.Sprintf("user%d@example.com", id))
		case r == 7:
			id := users[rng.IntN(len(users))]
			add(identity.UserStream(id), identity.ProfileUpdated{UserID: id, FirstName: "Ada", LastName: "Lovelace", Bio: "engines", Phone: "+100000", DateOfBirth: "1815-12-10", At: now})
		case r == 8 && len(sessions) > 0:
			s := sessions[rng.IntN(len(sessions))]
			add(identity.SessionStream(s.id), identity.SessionRefreshed{SessionID: s.id, PreviousID: uuid.NewString(), RefreshID: uuid.NewString(), At: now, ExpiresAt: now.Add(30 * 24 * time.Hour)})
		case len(sessions) > 0:
			i := rng.IntN(len(sessions))
			s := sessions[i]
			sessions = slices.Delete(sessions, i, i+1)
			add(identity.SessionStream(s.id), identity.SessionRevoked{SessionID: s.id, UserID: s.user, Kind: "api", Reason: identity.RevokedLogout, At: now, ExpiresAt: now.Add(30 * 24 * time.Hour)})
		}
	}
	return out[:n]
}

// BenchmarkProjectionApply feeds 100,000 identity events from the topic
// through the batch runner into the identity read models, and in the same
// run, alternating with it, reads the same topic with a plain sarama
// consumer group that does nothing with the messages. Each b.N round is one
// of each; the medians are reported as events/s and raw_events/s.
//
//	go test -run '^$' -bench BenchmarkProjectionApply -benchtime 3x ./projections/identity/
func BenchmarkProjectionApply(b *testing.B) {
	const total = 100_000
	ctx := context.Background()
	// One connection per partition, as cfgd serve's pool (32) allows.
	pgCfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	pgCfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pgCfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	c := testenv.Kafka(b, 8)
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		b.Fatal(err)
	}
	reg, err := events.NewRegistry(identity.Events()...)
	if err != nil {
		b.Fatal(err)
	}
	signer := testenv.Signer(b)
	envs := signInMix(b, total)
	streams := map[string]int64{}
	for _, e := range envs {
		streams[e.Stream] = max(streams[e.Stream], e.Version)
	}
	var versionSum int64
	for _, v := range streams {
		versionSum += v
	}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		b.Fatal(err)
	}
	signing := testenv.SigningPublisher(pub, signer)
	for chunk := range slices.Chunk(envs, 1000) {
		msgs := make([]*message.Message, 0, len(chunk))
		for _, e := range chunk {
			m, err := outbox.ToMessage(e)
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		if err := signing.Publish(c.Topic(kafka.TopicEvents), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	_ = pub.Close()

	var applyRates, rawRates []float64
	round := 0
	for b.Loop() {
		round++
		rawRates = append(rawRates, float64(total)/rawConsume(b, c, fmt.Sprintf("raw-%d", round), total).Seconds())
		applyRates = append(applyRates, float64(total)/runnerConsume(b, pool, c, reg, signer, round, len(streams), versionSum).Seconds())
	}
	b.ReportMetric(median(applyRates), "events/s")
	b.ReportMetric(median(rawRates), "raw_events/s")
	b.Logf("rounds: runner %v events/s, raw %v events/s", applyRates, rawRates)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// rawConsume reads the whole topic with a fresh consumer group and returns
// how long that took, group join included, as for the runner.
func rawConsume(b *testing.B, c kafka.Config, group string, total int) time.Duration {
	b.Helper()
	cg, err := sarama.NewConsumerGroup(c.Brokers, group, c.ConsumerSarama())
	if err != nil {
		b.Fatal(err)
	}
	defer cg.Close()
	go func() {
		for range cg.Errors() {
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &countHandler{total: int64(total), done: cancel}
	start := time.Now()
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{c.Topic(kafka.TopicEvents)}, h); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

type countHandler struct {
	n, total int64
	done     func()
}

func (h *countHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *countHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *countHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		sess.MarkMessage(m, "")
		if atomic.AddInt64(&h.n, 1) == h.total {
			h.done()
		}
	}
	return nil
}

// runnerConsume empties the read models and checkpoints, then runs the
// identity projections in a fresh consumer group until every stream's last
// version is checkpointed, and returns how long that took.
func runnerConsume(b *testing.B, pool *pgxpool.Pool, c kafka.Config, reg *events.Registry, signer *events.Signer, round, streams int, versionSum int64) time.Duration {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `TRUNCATE users, profiles, registration_sources, user_registration_sources, session_revocations, projection_checkpoints, projection_positions`); err != nil {
		b.Fatal(err)
	}
	runner, err := projections.NewRunner(projections.Config{Bus: c, Registry: reg, Signer: signer}, pool, testenv.Quiet())
	if err != nil {
		b.Fatal(err)
	}
	ps := projectors.Identity()
	g := projections.Group{Name: fmt.Sprintf("identity-bench-%d", round), Projections: ps}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- runner.Run(rctx, g) }()
	wantRows, wantSum := int64(streams*len(ps)), versionSum*int64(len(ps))
	for {
		var rows, sum int64
		if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(version), 0) FROM projection_checkpoints`).Scan(&rows, &sum); err != nil {
			b.Fatal(err)
		}
		if rows == wantRows && sum == wantSum {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return elapsed
}
