// Package rig holds what the fault tests (cmd/cfgd/faults), make chaos
// (cmd/chaos) and the serve ingest bench (cmd/loadgen -serve) do to a
// cfgd they run: a private Postgres cluster, the API key `cfgd apikey
// create` prints, JSON calls over HTTP, request-log events and their gRPC
// and OTLP forms, and the check that every registered user has its one
// row.
package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxAnswer bounds the answer Do reads: the answers these drivers decode
// (ingest results, statistics, key and task lists) are far smaller.
const maxAnswer = 16 << 20

// Do sends body (JSON, when non-nil) to url with headers and decodes a 2xx
// answer into out (when non-nil); it returns the status code.
func Do(ctx context.Context, c *http.Client, method, url string, body any, headers map[string]string, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s answer: %w", req.URL.Path, err)
		}
	}
	return resp.StatusCode, nil
}

// LogEvent is a request-log event as POST /api/grpc/monitor/ingest/ takes
// it (the fields these drivers send).
type LogEvent struct {
	RequestID   string `json:"request_id"`
	ServiceName string `json:"service_name"`
	MethodName  string `json:"method_name"`
	Status      string `json:"status"`
	DurationMS  int64  `json:"duration_ms"`
	APIKeyID    int64  `json:"api_key_id,omitempty"`
}

var apiKeyLine = regexp.MustCompile(`id=(\d+) `)

// ParseAPIKey reads what `cfgd apikey create` printed: the key's id on
// the first line, the key itself on the last.
func ParseAPIKey(out string) (key string, id int64, err error) {
	m := apiKeyLine.FindStringSubmatch(out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if m == nil || len(lines) < 2 {
		return "", 0, fmt.Errorf("cfgd apikey create printed %q", out)
	}
	id, err = strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("cfgd apikey create printed %q: %w", out, err)
	}
	return strings.TrimSpace(lines[len(lines)-1]), id, nil
}

// Postgres is a private Postgres cluster (Debian's binaries, initdb into
// its own directory, its socket there too), so that a kill touches nothing
// else. Postgres refuses to run as root: then it runs as the postgres
// user, as deploy/scripts/local/stack.sh does.
type Postgres struct {
	Port int
	dir  string
	bin  string
	cred *syscall.Credential
}

// InitPostgres makes the cluster in dir (created) for port; it does not
// start it.
func InitPostgres(dir string, port int) (*Postgres, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, errors.New("no /usr/lib/postgresql/*/bin/initdb (run make stack-up)")
	}
	p := &Postgres{Port: port, dir: dir, bin: filepath.Dir(bins[len(bins)-1])}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	initdb := p.as(exec.Command(filepath.Join(p.bin, "initdb"), "-D", p.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"))
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return p, nil
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

func (p *Postgres) as(cmd *exec.Cmd) *exec.Cmd {
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// Command is the postmaster's command (not started) with up to
// maxConnections connections and sharedBuffers (say "64MB").
func (p *Postgres) Command(maxConnections int, sharedBuffers string) *exec.Cmd {
	return p.as(exec.Command(filepath.Join(p.bin, "postgres"), "-D", p.data(), "-p", strconv.Itoa(p.Port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections="+strconv.Itoa(maxConnections), "-c", "shared_buffers="+sharedBuffers))
}

// URL is the URL of database db.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// CreateDatabase waits (within ctx) until the started cluster takes
// connections and creates database db.
func (p *Postgres) CreateDatabase(ctx context.Context, db string) error {
	var conn *pgx.Conn
	var err error
	for {
		if conn, err = pgx.Connect(ctx, p.URL("postgres")); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("private postgres: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	return err
}

// Inconsistent is a users check that no waiting can mend: the event store
// or the read model contradicts itself.
type Inconsistent struct{ msg string }

func (e *Inconsistent) Error() string { return e.msg }

// Users checks that the users read model holds exactly the users the
// event store registered, each address once, each registered user's row
// by its id, and returns every user's id by lower-cased e-mail. An
// *Inconsistent error is final; another one may be the read model still
// catching up.
func Users(ctx context.Context, pg *pgxpool.Pool) (map[string]int64, error) {
	var registered, claimed, rows, distinct int
	if err := pg.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM events WHERE type = 'user.registered'),
		(SELECT count(*) FROM events WHERE type = 'user.email_claimed'),
		(SELECT count(*) FROM users),
		(SELECT count(DISTINCT lower(email)) FROM users)`).Scan(&registered, &claimed, &rows, &distinct); err != nil {
		return nil, err
	}
	if distinct != rows {
		return nil, &Inconsistent{fmt.Sprintf("users are not unique by e-mail: %d rows, %d addresses", rows, distinct)}
	}
	if registered != claimed {
		return nil, &Inconsistent{fmt.Sprintf("event store: %d users registered, %d addresses claimed", registered, claimed)}
	}
	if rows != registered {
		return nil, fmt.Errorf("users read model has %d rows, the event store registered %d", rows, registered)
	}
	var orphans int
	if err := pg.QueryRow(ctx, `SELECT count(*) FROM events e WHERE e.type = 'user.registered'
		AND NOT EXISTS (SELECT 1 FROM users u WHERE 'user-' || u.id = e.stream_id)`).Scan(&orphans); err != nil {
		return nil, err
	}
	if orphans > 0 {
		return nil, fmt.Errorf("%d registered users have no row", orphans)
	}
	r, err := pg.Query(ctx, `SELECT lower(email), id FROM users`)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	users := map[string]int64{}
	for r.Next() {
		var email string
		var id int64
		if err := r.Scan(&email, &id); err != nil {
			return nil, err
		}
		users[email] = id
	}
	return users, r.Err()
}
