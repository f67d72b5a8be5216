// Package authtest starts the whole sign-in feature for component tests:
// a fresh migrated Postgres database, a private embedded Kafka broker with
// the real relay and identity projections, the local Redis under a random
// key prefix, an in-process SMTP server that captures every message, and
// the real HTTP router (auth, profile and analytics mounted) on an
// httptest server. Only the SMTP server is a stand-in, for the mail
// provider outside the machine.
package authtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/cmd/settings"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/mail"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// RedisURL is the Redis the tests use: CFGD_TEST_REDIS_URL when set (a
// stack started with CFGD_REDIS_PORT, a CI service), else REDIS__URL's
// default.
func RedisURL() string {
	if u := os.Getenv("CFGD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return settings.DefaultCore().RedisURL
}

// Clock is a settable test clock: real time plus an offset, or a fixed
// time once stopped.
type Clock struct {
	offset  atomic.Int64
	stopped atomic.Int64 // UnixNano of the fixed time; 0 while running
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	if at := c.stopped.Load(); at != 0 {
		return time.Unix(0, at).Add(time.Duration(c.offset.Load()))
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Stop fixes the clock at its current time, so that a test measuring an
// age to the millisecond (a code's 300 s) does not count the real time
// its requests take on a loaded machine.
func (c *Clock) Stop() { c.stopped.Store(time.Now().UnixNano()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Env is one running sign-in stack.
type Env struct {
	URL    string
	Server *httptest.Server
	Pool   *pgxpool.Pool
	Redis  *redis.Client
	Mail   *SMTPServer
	Clock  *Clock
	API    *auth.API
	App    *signin.App
	Config signin.Config
	// MediaDir is where uploaded files (avatars) are stored.
	MediaDir string
}

// Options change the stack.
type Options struct {
	// Config changes the sign-in configuration the stack starts with.
	Config func(*signin.Config)
	// MaxConns sizes the Postgres pool (default 16).
	MaxConns int32
	// NoPipeline leaves the relay and projections off.
	NoPipeline bool
	// MaxEventBytes, when set, is the append limit the core gets (as
	// EVENTS__MAX_BYTES gives it to cfgd serve).
	MaxEventBytes int
	// Usage, when set, takes the requests API keys authenticate (as the
	// usage recorder does in cfgd serve).
	Usage signin.Usage
}

// Start brings the stack up for t; everything stops when t ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	commits := store.WatchCommits(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	redisURL := RedisURL()
	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ropts)
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("authtest: redis at %s: %v (run deploy/scripts/local/stack.sh up)", redisURL, err)
	}

	smtpSrv := StartSMTP(t)
	sc := signin.DefaultConfig()
	sc.Email = signin.EmailConfig{
		Backend: "smtp", SMTPHost: smtpSrv.Host, SMTPPort: smtpSrv.PortNumber(), SMTPSecurity: mail.SecurityNone,
		From: "no-reply@cfgd.test", SMTPTimeout: 5 * time.Second,
	}
	sc.KeysDir = t.TempDir()
	sc.RedisPrefix = "cfgd-test:" + randomHex(6) + ":"
	sc.JWT.RevocationPoll = 200 * time.Millisecond
	// A loaded CI machine can take seconds to start a consumer group;
	// tests are about answers, not about this bound.
	sc.ReadWait = 30 * time.Second
	if o.Config != nil {
		o.Config(&sc)
	}
	clock := &Clock{}
	var limits *store.Store
	if o.MaxEventBytes > 0 {
		if limits, err = store.New(store.Config{MaxEventBytes: o.MaxEventBytes}); err != nil {
			t.Fatal(err)
		}
	}
	app, err := signin.New(sc, signin.Deps{Pool: pool, Events: limits, Redis: rdb, Log: testenv.Quiet(), Console: io.Discard, Now: clock.Now, Usage: o.Usage})
	if err != nil {
		t.Fatal(err)
	}
	mediaDir := t.TempDir()
	router, a := newRouter(t, app, pool, clock.Now, mediaDir)

	if !o.NoPipeline {
		reg, err := events.NewRegistry(identity.Events()...)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Pipeline(t, pool, commits.C(), testenv.Kafka(t, 3), reg, projectors.Identity()...)
	}
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	return &Env{URL: srv.URL, Server: srv, Pool: pool, Redis: rdb, Mail: smtpSrv, Clock: clock, API: a, App: app, Config: sc, MediaDir: mediaDir}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Email returns a fresh address for a test.
func Email(prefix string) string {
	return strings.ToLower(prefix) + "-" + randomHex(5) + "@example.com"
}

// Replica starts a second API instance on the same database, Redis and
// keys, as another cfgd process would be; it shares nothing in memory with
// e (its revocation set in particular).
func (e *Env) Replica(t testing.TB) *Env {
	t.Helper()
	app, err := signin.New(e.Config, signin.Deps{Pool: e.Pool, Redis: e.Redis, Log: testenv.Quiet(), Console: io.Discard, Now: e.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	router, a := newRouter(t, app, e.Pool, e.Clock.Now, e.MediaDir)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	r := *e
	r.URL, r.Server, r.API, r.App = srv.URL, srv, a, app
	return &r
}

func newRouter(t testing.TB, app *signin.App, pool *pgxpool.Pool, now func() time.Time, mediaDir string) (*mux.Router, *auth.API) {
	t.Helper()
	router, err := rest.NewRouter(testenv.Quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := modules.DefaultIdentityConfig()
	cfg.Media.Dir = mediaDir
	id, a, err := modules.Identity(app, cfg, pool, now)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := pages.NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	fr := modules.Front(pages.DefaultFrontConfig(), assets, pages.Link{Rel: "extensions", Href: "/cfg/extensions/", Title: "Installed extensions"})
	if err := modules.Mount(router, id, fr); err != nil {
		t.Fatal(err)
	}
	return router, a
}

// WithRoutes serves e's API on a new server whose router also has the
// routes add mounts (tests put probes behind the middleware this way).
func (e *Env) WithRoutes(t testing.TB, add func(r *mux.Router)) *Env {
	t.Helper()
	router, a := newRouter(t, e.App, e.Pool, e.Clock.Now, e.MediaDir)
	add(router)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	r := *e
	r.URL, r.Server, r.API = srv.URL, srv, a
	return &r
}

// Superuser creates a staff superuser with a password and waits until the
// users read model has them.
func (e *Env) Superuser(t testing.TB, email, password string) int64 {
	t.Helper()
	u, err := e.App.CreateSuperuser.Handle(context.Background(), user.CreateSuperuser{Email: email, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, projectors.UsersName, identity.UserStream(u.ID))
	return u.ID
}
