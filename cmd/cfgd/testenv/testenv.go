// Package testenv gives integration tests their own real resources on the
// local stack (deploy/scripts/local/stack.sh): a fresh Postgres database per test,
// a private in-process Kafka broker per test, and helpers to read topics.
// Nothing here is a fake; isolation comes from fresh names, so tests can run
// in parallel.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// localPostgres is the server deploy/scripts/local/stack.sh starts (the default of
// POSTGRES__URL, on its maintenance database).
const localPostgres = "postgres:///postgres?host=/var/run/postgresql&user=postgres"

// PostgresAdminURL is the server tests create their databases on; override
// with CFGD_TEST_POSTGRES_URL.
func PostgresAdminURL() string {
	if u := os.Getenv("CFGD_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return localPostgres
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("testenv: bad postgres url %q: %v", raw, err))
	}
	u.Path = "/" + db
	return u.String()
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// templateOnce resolves, once per test binary, the migrated template that
// tests clone, which is far faster than migrating every database. The
// template is named after the migrations' fingerprint and kept between runs,
// so only the first run after a migration change pays for migrating;
// templates not built for a day are dropped when a new one is made.
var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

func template(ctx context.Context) (string, error) {
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	return templateName, templateErr
}

func ensureTemplate(ctx context.Context) (string, error) {
	fp, err := schemas.Fingerprint()
	if err != nil {
		return "", err
	}
	name := "cfgd_tpl_" + fp
	admin, err := pgx.Connect(ctx, PostgresAdminURL())
	if err != nil {
		return "", fmt.Errorf("testenv: postgres is not reachable (run deploy/scripts/local/stack.sh up): %w", err)
	}
	defer admin.Close(ctx)
	// Test binaries run in parallel; one builds the template, the rest wait.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(hashtext('cfgd-testenv-template'))`); err != nil {
		return "", fmt.Errorf("testenv: template lock: %w", err)
	}
	defer admin.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('cfgd-testenv-template'))`) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("testenv: template lookup: %w", err)
	}
	if exists {
		return name, nil
	}
	// Build under a scratch name and rename at the end, so a crash halfway
	// never leaves a half-migrated template behind the final name.
	scratch := randomName("cfgd_tplwip_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+scratch); err != nil {
		return "", fmt.Errorf("testenv: create template: %w", err)
	}
	pool, err := pgxpool.New(ctx, withDatabase(PostgresAdminURL(), scratch))
	if err != nil {
		return "", err
	}
	err = schemas.UpPostgres(ctx, pool, Quiet())
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("testenv: migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", scratch, name)); err != nil {
		return "", fmt.Errorf("testenv: rename template: %w", err)
	}
	// Several checkouts (git worktrees) with different migrations share the
	// server: a template is stale only once it has not been built for a
	// day, so no checkout drops the template another is testing with.
	if _, err := admin.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%d'", name, time.Now().Unix())); err != nil {
		return "", fmt.Errorf("testenv: mark template: %w", err)
	}
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database d WHERE (datname LIKE 'cfgd\_tpl%') AND datname <> $1
		AND coalesce(shobj_description(d.oid, 'pg_database'), '') ~ '^[0-9]+$'
		AND shobj_description(d.oid, 'pg_database')::bigint < extract(epoch FROM now() - interval '1 day')`, name)
	if err != nil {
		return name, nil
	}
	stale, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, db := range stale {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}
	return name, nil
}

// PostgresURL creates a migrated database for t, dropped when t ends, and
// returns its URL.
func PostgresURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tpl, err := template(ctx)
	if err != nil {
		t.Fatal(err)
	}
	name := randomName("cfgd_test_")
	admin, err := pgx.Connect(ctx, PostgresAdminURL())
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	defer admin.Close(ctx)
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tpl))
		var pg *pgconn.PgError
		// Two clones of one template at the same instant can collide.
		if err != nil && errors.As(err, &pg) && pg.Code == "55006" && attempt < 50 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		// Another checkout's test run dropped the template: build it again.
		if err != nil && errors.As(err, &pg) && pg.Code == "3D000" && attempt < 50 {
			if _, terr := ensureTemplate(ctx); terr != nil {
				t.Fatal(terr)
			}
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, PostgresAdminURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDatabase(PostgresAdminURL(), name)
}

// EmptyPostgres creates a database with no schema for t (for migration
// tests), dropped when t ends.
func EmptyPostgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, PostgresAdminURL())
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	defer admin.Close(ctx)
	name := randomName("cfgd_empty_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	pool, err := pgxpool.New(ctx, withDatabase(PostgresAdminURL(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, PostgresAdminURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	return pool
}

// Postgres is PostgresURL with an open pool, closed when t ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Kafka starts a private broker for t and returns a bus config for it with
// the given partition count; the broker stops when t ends.
func Kafka(t testing.TB, partitions int) kafka.Config {
	t.Helper()
	e, err := kafka.StartEmbedded("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return kafka.Config{Brokers: []string{e.Addr()}, Partitions: partitions, TopicPrefix: randomName("t") + ".", ClientID: "cfgd-test", SASL: e.SASL()}
}

// ReadTopic reads every partition of topic from the oldest offset until want
// records have arrived or timeout passes, and returns what it got.
func ReadTopic(t testing.TB, c kafka.Config, topic string, want int, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	return ReadTopicUntil(t, c, topic, func(got []*sarama.ConsumerMessage) bool { return len(got) >= want }, timeout)
}

// ReadTopicUntil reads every partition of topic from the oldest offset
// until done says what arrived is enough (checked after each read of what
// the topic held) or timeout passes, and returns what it got: it reads the
// ranges between the partitions' ends with kafka.Reader, again and again.
func ReadTopicUntil(t testing.TB, c kafka.Config, topic string, done func([]*sarama.ConsumerMessage) bool, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	r, err := kafka.NewReader(c)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []*sarama.ConsumerMessage
	var next map[int32]int64
	more := func() {
		ends, err := r.Ends(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return // not created yet
		}
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		reached, err := r.Read(ctx, topic, next, ends, 1024, func(_ context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
			got = append(got, msgs...)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			t.Fatalf("testenv: read %s: %v", topic, err)
		}
		next = reached
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for more(); !done(got); more() {
		if !wait(20 * time.Millisecond) {
			return got
		}
	}
	// Give duplicates a moment to show up, since callers count them.
	if wait(200 * time.Millisecond) {
		more()
	}
	return got
}

// testSigningKey is the event signing key of every test: relays and
// projections built by different helpers of one test agree on it.
const testSigningKey = "cfgd-test-signing-key-0123456789abcdef"

// Signer is the event signer tests share.
func Signer(t testing.TB) *events.Signer {
	t.Helper()
	s, err := events.NewSigner([]byte(testSigningKey))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Dump runs each query on db and returns its rows as text, one line a row
// under a line naming the query: two dumps of the same queries are equal
// exactly when the rows are, which is what the replay determinism tests
// compare.
func Dump(t testing.TB, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, queries ...string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range queries {
		fmt.Fprintf(&b, "-- %s\n", q)
		rows, err := db.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("dump %s: %v", q, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("dump %s: %v", q, err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("dump %s: %v", q, err)
		}
	}
	return b.String()
}
