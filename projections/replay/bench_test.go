package replay_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/cfgd/cfgd/projections/projectors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/projections/replay"
)

// BenchmarkReplayPostgres is `make bench-replay-postgres`: it fills a fresh
// database's event store with CFGD_BENCH_REPLAY_EVENTS (default 1,000,000)
// domain events as the sign-in, profile, session and API-key commands
// append them, then alternates, once per round, (a) a raw read of the whole
// log in the replay's order, every event scanned and its payload decoded,
// with (b) replay.Run of every Postgres read-model projection (identity.users,
// identity.revocations, apikey.keys), shadow build and swap included. The
// rate of a replay is the events it read (the whole log) per second of
// replay.Run; "all" is the log replayed into every read model, one after
// the other, per second of the three runs together.
//
//	go test -run '^$' -bench BenchmarkReplayPostgres -benchtime 3x -timeout 60m ./projections/replay/
func BenchmarkReplayPostgres(b *testing.B) {
	total := 1_000_000
	if s := os.Getenv("CFGD_BENCH_REPLAY_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("CFGD_BENCH_REPLAY_EVENTS=%q: want a positive count", s)
		}
		total = n
	}
	cfg := replay.Config{}
	if s := os.Getenv("CFGD_BENCH_REPLAY_BATCH"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("CFGD_BENCH_REPLAY_BATCH=%q: %v", s, err)
		}
		cfg.BatchSize = n
	}
	ctx := context.Background()
	// CFGD_BENCH_REPLAY_URL names a database to fill once and keep, so
	// that two builds can be compared round by round on the same log.
	url := os.Getenv("CFGD_BENCH_REPLAY_URL")
	if url == "" {
		url = testenv.PostgresURL(b)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	reg, err := events.NewRegistry(append(identity.Events(), apikey.Events()...)...)
	if err != nil {
		b.Fatal(err)
	}
	var have int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have != 0 && have != total {
		b.Fatalf("the database holds %d events, not %d", have, total)
	}
	start := time.Now()
	mix, err := appendDomainMix(ctx, pool, total, have == 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("setup: %d events (%s) in %d streams appended in %s", total, mix, mix.streams, time.Since(start).Round(time.Millisecond))

	ps := slices.Concat(projectors.Identity(), projectors.APIKeys())
	raw := make([]float64, 0, 3)
	rates := map[string][]float64{}
	var all []float64
	round := 0
	for b.Loop() {
		round++
		d, n, err := rawRead(ctx, pool, reg, cfg.WithDefaults().BatchSize)
		if err != nil {
			b.Fatal(err)
		}
		if n != int64(total) {
			b.Fatalf("raw read %d events, want %d", n, total)
		}
		raw = append(raw, float64(n)/d.Seconds())
		var sum time.Duration
		line := fmt.Sprintf("round %d: raw %.0f events/s", round, raw[len(raw)-1])
		for _, p := range ps {
			res, err := replay.Run(ctx, pool, reg, p, cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			if res.Events != int64(total) {
				b.Fatalf("%s read %d events, want %d", p.Name, res.Events, total)
			}
			rate := float64(res.Events) / res.Elapsed.Seconds()
			rates[p.Name] = append(rates[p.Name], rate)
			sum += res.Elapsed
			line += fmt.Sprintf(", %s %.0f events/s (%d applied, %s)", p.Name, rate, res.Applied, res.Elapsed.Round(time.Millisecond))
		}
		all = append(all, float64(total)/sum.Seconds())
		b.Logf("%s, all %.0f events/s", line, all[len(all)-1])
		if err := mix.check(ctx, pool); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(median(raw), "raw_events/s")
	for _, p := range ps {
		b.ReportMetric(median(rates[p.Name]), p.Name+"_events/s")
		b.Logf("%s: median %.0f events/s, %.2f of raw; rounds %.0f", p.Name, median(rates[p.Name]), median(rates[p.Name])/median(raw), rates[p.Name])
	}
	b.ReportMetric(median(all), "all_events/s")
	b.Logf("raw: median %.0f events/s; rounds %.0f", median(raw), raw)
	b.Logf("all read models: median %.0f events/s, %.2f of raw; rounds %.0f", median(all), median(all)/median(raw), all)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// rawRead reads the whole log as replay does (relay order, batches of
// batch events, one transaction each) and decodes every payload, without
// applying anything.
func rawRead(ctx context.Context, pool *pgxpool.Pool, reg *events.Registry, batch int) (time.Duration, int64, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Release()
	start := time.Now()
	var txID, pos, n int64
	for {
		var got int
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `
				SELECT tx_id::text::bigint, event_id, stream_id, stream_version, position, type, occurred_at, metadata, data
				FROM public.events
				WHERE (tx_id, position) > ($1::bigint::text::xid8, $2)
				  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
				ORDER BY events.tx_id, events.position
				LIMIT $3`, txID, pos, batch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				e, err := store.ScanAfter(rows, &txID)
				if err != nil {
					return err
				}
				if _, err := reg.Decode(e); err != nil {
					return err
				}
				pos = e.Position
				got++
			}
			return rows.Err()
		})
		if err != nil {
			return 0, 0, fmt.Errorf("raw read: %w", err)
		}
		n += int64(got)
		if got == 0 {
			return time.Since(start), n, nil
		}
	}
}

// domainMix counts what appendDomainMix appended, to check the replayed
// read models against.
type domainMix struct {
	streams                     int
	users, sourced, revocations int
	keys, revokedKeys           int
	types                       map[string]int
}

func (m domainMix) String() string {
	keys := make([]string, 0, len(m.types))
	for k := range m.types {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m.types[k])
	}
	return s
}

// check compares the read models' row counts with what was appended.
func (m domainMix) check(ctx context.Context, pool *pgxpool.Pool) error {
	var users, profiles, links, revs, keys, revoked int
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM profiles),
		(SELECT count(*) FROM user_registration_sources), (SELECT count(*) FROM session_revocations),
		(SELECT count(*) FROM api_keys), (SELECT count(*) FROM api_keys WHERE NOT is_active)`).
		Scan(&users, &profiles, &links, &revs, &keys, &revoked)
	if err != nil {
		return err
	}
	got := [...]int{users, profiles, links, revs, keys, revoked}
	want := [...]int{m.users, m.users, m.sourced, m.revocations, m.keys, m.revokedKeys}
	if got != want {
		return fmt.Errorf("read models hold users, profiles, links, revocations, keys, revoked keys %v, want %v", got, want)
	}
	return nil
}

// appendDomainMix appends (when write is set) n events with COPY, in transactions of 50,000
// events, in the order and with the payloads the commands append them:
// sign-ups (code issued, perhaps a wrong guess, verified, address claimed,
// user registered, often from a source, session started), returning
// sign-ins (code issued and verified, logged in, session started), profile
// and avatar edits, refreshes, logouts, and API keys created and revoked.
// The log in the store carries no signature (the relay signs what it
// publishes), so none is made here.
func appendDomainMix(ctx context.Context, pool *pgxpool.Pool, n int, write bool) (domainMix, error) {
	g := newMixGen(n)
	for g.len() < n {
		g.step()
	}
	envs := g.out[:n]
	mix := g.mix(envs)
	if !write {
		return mix, nil
	}
	const perTx = 50_000
	for chunk := range slices.Chunk(envs, perTx) {
		rows := make([][]any, len(chunk))
		for i, e := range chunk {
			md, err := json.Marshal(e.Metadata)
			if err != nil {
				return mix, err
			}
			rows[i] = []any{e.ID, e.Stream, e.Version, e.Type, e.OccurredAt, string(md), string(e.Data)}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"},
				[]string{"event_id", "stream_id", "stream_version", "type", "occurred_at", "metadata", "data"}, pgx.CopyFromRows(rows))
			return err
		})
		if err != nil {
			return mix, fmt.Errorf("append: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		return mix, err
	}
	return mix, nil
}

type session struct {
	id, refresh string
	user        int64
	exp         time.Time
}

type mixGen struct {
	rng      *rand.Rand
	now      time.Time
	versions map[string]int64
	out      []events.Envelope
	users    []string // email of user id i+1
	active   []session
	keys     []int64 // live API keys
	nextKey  int64
	sources  user.Sources
}

func newMixGen(n int) *mixGen {
	return &mixGen{
		rng:      rand.New(rand.NewPCG(13, 2026)),
		now:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		versions: map[string]int64{},
		out:      make([]events.Envelope, 0, n+16),
		sources:  user.Sources{DashboardHosts: []string{"dashboard.cfgd.dev"}, RegistrationPaths: []string{"/register", "/signup"}},
	}
}

func (g *mixGen) len() int { return len(g.out) }

var (
	firstNames = []string{"ada", "grace", "alan", "linus", "margaret", "ken", "barbara", "dennis", "frances", "edsger", "radia", "john"}
	lastNames  = []string{"lovelace", "hopper", "turing", "torvalds", "hamilton", "thompson", "liskov", "ritchie", "allen", "dijkstra", "perlman", "backus"}
	domains    = []string{"example.com", "mail.example.org", "corp.example.net", "uni.example.edu"}
	sourceURLs = []string{
		"https://www.google.com/search?q=cfgd", "https://news.ycombinator.com/item?id=4242",
		"https://cfgd.dev/?utm_source=newsletter&utm_campaign=spring_sale", "https://cfgd.dev/pricing?utm_source=linkedin&utm_campaign=launch",
		"https://dashboard.cfgd.dev/invite/team", "/register", "/signup?ref=docs", "https://github.com/cfgd/cfgd",
	}
	keyTypes = apikey.Types()
)

// add appends one event of stream at the stream's next version, a moment
// after the previous event.
func (g *mixGen) add(stream string, md events.Metadata, e events.Event) {
	env, err := events.New(stream, e, md, g.now)
	if err != nil {
		panic(err) // the payloads are plain structs
	}
	g.versions[stream]++
	env.Version = g.versions[stream]
	g.out = append(g.out, env)
}

func (g *mixGen) meta(actor string) events.Metadata {
	return events.Metadata{CorrelationID: uuid.NewString(), Actor: actor}
}

// step appends one command's events.
func (g *mixGen) step() {
	g.now = g.now.Add(time.Duration(g.rng.IntN(2000)) * time.Millisecond)
	switch r := g.rng.IntN(100); {
	case r < 25 || len(g.users) == 0:
		g.signIn(0)
	case r < 55:
		g.signIn(int64(g.rng.IntN(len(g.users)) + 1))
	case r < 67:
		id := int64(g.rng.IntN(len(g.users)) + 1)
		fn, ln := firstNames[g.rng.IntN(len(firstNames))], lastNames[g.rng.IntN(len(lastNames))]
		dob := ""
		if g.rng.IntN(2) == 0 {
			dob = fmt.Sprintf("19%02d-%02d-%02d", 50+g.rng.IntN(50), 1+g.rng.IntN(12), 1+g.rng.IntN(28))
		}
		g.add(identity.UserStream(id), g.meta("user:"+strconv.FormatInt(id, 10)), identity.ProfileUpdated{
			UserID: id, FirstName: capital(fn), LastName: capital(ln), Bio: "Works on " + lastNames[g.rng.IntN(len(lastNames))] + " systems.",
			Phone: fmt.Sprintf("+4930%07d", g.rng.IntN(10_000_000)), DateOfBirth: dob, At: g.now})
	case r < 70:
		id := int64(g.rng.IntN(len(g.users)) + 1)
		g.add(identity.UserStream(id), g.meta("user:"+strconv.FormatInt(id, 10)), identity.AvatarChanged{
			UserID: id, Avatar: fmt.Sprintf("avatars/%d/%s.png", id, uuid.NewString()[:8]), At: g.now})
	case r < 80 && len(g.active) > 0:
		i := g.rng.IntN(len(g.active))
		s := &g.active[i]
		next := uuid.NewString()
		s.exp = g.now.Add(30 * 24 * time.Hour)
		g.add(identity.SessionStream(s.id), g.meta(""), identity.SessionRefreshed{SessionID: s.id, PreviousID: s.refresh, RefreshID: next, At: g.now, ExpiresAt: s.exp})
		s.refresh = next
	case r < 92 && len(g.active) > 0:
		i := g.rng.IntN(len(g.active))
		s := g.active[i]
		g.active[i] = g.active[len(g.active)-1]
		g.active = g.active[:len(g.active)-1]
		reason := identity.RevokedLogout
		if g.rng.IntN(50) == 0 {
			reason = identity.RevokedReuse
		}
		g.add(identity.SessionStream(s.id), g.meta("user:"+strconv.FormatInt(s.user, 10)), identity.SessionRevoked{
			SessionID: s.id, UserID: s.user, Kind: identity.SessionAPI, Reason: reason, At: g.now, ExpiresAt: s.exp})
	case r < 97:
		owner := int64(g.rng.IntN(len(g.users)) + 1)
		g.nextKey++
		raw := make([]byte, 32)
		for i := range raw {
			raw[i] = byte(g.rng.Uint32())
		}
		key := apikey.Prefix + base64.RawURLEncoding.EncodeToString(raw)
		sum := sha256.Sum256([]byte(key))
		var exp *time.Time
		if g.rng.IntN(3) == 0 {
			t := g.now.Add(365 * 24 * time.Hour)
			exp = &t
		}
		g.add(apikey.Stream(g.nextKey), g.meta("staff:admin@example.com"), apikey.Created{
			KeyID: g.nextKey, Name: fmt.Sprintf("%s key %d", keyTypes[g.nextKey%int64(len(keyTypes))], g.nextKey), KeyType: keyTypes[g.nextKey%int64(len(keyTypes))],
			KeyHash: hex.EncodeToString(sum[:]), MaskedKey: apikey.Mask(key), UserID: owner, UserEmail: g.users[owner-1],
			CreatedBy: "admin@example.com", CreatedAt: g.now, ExpiresAt: exp})
		g.keys = append(g.keys, g.nextKey)
	case len(g.keys) > 0:
		i := g.rng.IntN(len(g.keys))
		id := g.keys[i]
		g.keys[i] = g.keys[len(g.keys)-1]
		g.keys = g.keys[:len(g.keys)-1]
		g.add(apikey.Stream(id), g.meta("staff:admin@example.com"), apikey.Revoked{KeyID: id, RevokedBy: "admin@example.com", At: g.now})
	default:
		g.signIn(0)
	}
}

// signIn appends an OTP sign-in of user id, or a sign-up (id 0).
func (g *mixGen) signIn(id int64) {
	var email string
	if id == 0 {
		email = fmt.Sprintf("%s.%s%d@%s", firstNames[g.rng.IntN(len(firstNames))], lastNames[g.rng.IntN(len(lastNames))], len(g.users)+1, domains[g.rng.IntN(len(domains))])
	} else {
		email = g.users[id-1]
	}
	md := g.meta("")
	otp := identity.OTPStream(email)
	code := uuid.NewString()
	src := ""
	if id == 0 && g.rng.IntN(10) < 6 {
		src = sourceURLs[g.rng.IntN(len(sourceURLs))]
	}
	mac := sha256.Sum256([]byte(code + email))
	g.add(otp, md, identity.OTPIssued{CodeID: code, Email: email, CodeHMAC: hex.EncodeToString(mac[:]), IssuedAt: g.now, ExpiresAt: g.now.Add(10 * time.Minute), SourceURL: src})
	attempt := 1
	if g.rng.IntN(8) == 0 {
		g.add(otp, md, identity.OTPAttempted{CodeID: code, Attempt: 1})
		attempt = 2
	}
	if g.rng.IntN(40) == 0 {
		g.add(otp, md, identity.OTPDeliveryFailed{CodeID: code, Reason: "smtp: 451 try again later"})
		return
	}
	sid := uuid.NewString()
	g.now = g.now.Add(time.Duration(20+g.rng.IntN(60)) * time.Second)
	if id == 0 {
		g.users = append(g.users, email)
		id = int64(len(g.users))
		at := g.now
		g.add(identity.EmailStream(email), md, identity.EmailClaimed{Email: email, UserID: id})
		g.add(identity.UserStream(id), md, identity.UserRegistered{UserID: id, Email: email, IsActive: true, JoinedAt: g.now, Via: identity.ViaOTP, SignedInAt: &at, SessionID: sid})
		if src != "" {
			g.add(identity.UserStream(id), md, identity.SourceLinked{UserID: id, SourceURL: src, SourceName: g.sources.Name(src), LinkedAt: g.now})
		}
	} else {
		g.add(identity.UserStream(id), md, identity.LoggedIn{UserID: id, SessionID: sid, At: g.now, Method: "otp"})
	}
	s := session{id: sid, refresh: uuid.NewString(), user: id, exp: g.now.Add(30 * 24 * time.Hour)}
	g.add(identity.SessionStream(sid), md, identity.SessionStarted{SessionID: sid, UserID: id, Kind: identity.SessionAPI, RefreshID: s.refresh,
		UserVersion: g.versions[identity.UserStream(id)], StartedAt: g.now, ExpiresAt: s.exp})
	g.add(otp, md, identity.OTPVerified{CodeID: code, Attempt: attempt, UserID: id, SessionID: sid})
	g.active = append(g.active, s)
}

// mix counts what envs (a prefix of everything generated) will build.
func (g *mixGen) mix(envs []events.Envelope) domainMix {
	m := domainMix{types: map[string]int{}}
	streams := map[string]bool{}
	linked := map[string]bool{}
	for _, e := range envs {
		streams[e.Stream] = true
		m.types[e.Type]++
		switch e.Type {
		case identity.UserRegistered{}.EventType():
			m.users++
		case identity.SourceLinked{}.EventType():
			linked[e.Stream] = true
		case identity.SessionRevoked{}.EventType():
			m.revocations++
		case apikey.Created{}.EventType():
			m.keys++
		case apikey.Revoked{}.EventType():
			m.revokedKeys++
		}
	}
	m.streams, m.sourced = len(streams), len(linked)
	return m
}

func capital(s string) string { return string(s[0]-'a'+'A') + s[1:] }
