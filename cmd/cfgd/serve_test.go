package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// syncBuffer is written by the server's goroutines and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// baseEnv points cfgd at per-test resources; tests add or override.
func baseEnv(t *testing.T, pgURL string) {
	t.Setenv("CFGD_ENV_FILE", t.TempDir()+"/none.env")
	t.Setenv("HTTP__ADDR", "127.0.0.1:0")
	t.Setenv("GRPC__ADDR", "127.0.0.1:0")
	t.Setenv("POSTGRES__URL", pgURL)
	t.Setenv("KAFKA__BROKERS", "")
	t.Setenv("KAFKA__EMBEDDED_ADDR", "127.0.0.1:0")
	t.Setenv("KAFKA__DATA_DIR", t.TempDir())
	t.Setenv("KAFKA__TOPIC_PREFIX", "serve-test.")
	t.Setenv("HTTP__SHUTDOWN_TIMEOUT", "5s")
	t.Setenv("AUTH__KEYS_DIR", t.TempDir())
	t.Setenv("GRPC__PROTO_DIR", t.TempDir())
	// The soft memory limit is the process's: an in-process serve would
	// set it for the whole test binary (and the race detector's heap).
	t.Setenv("SERVE__MEMORY_LIMIT_MB", "0")
}

type running struct {
	base   string
	stdout *syncBuffer
	stderr *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, []string{"serve"}, r.stdout, r.stderr) }()
	re := regexp.MustCompile(`API\s+(http://\S+)/`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(r.stdout.String()); m != nil {
			r.base = m[1]
			break
		}
		select {
		case err := <-r.done:
			t.Fatalf("serve exited early: %v\n%s", err, r.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r.base == "" {
		cancel()
		t.Fatalf("serve did not print its address:\n%s", r.stderr)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
		r.done <- nil // let a second stop return at once
	case <-time.After(30 * time.Second):
		t.Errorf("serve did not stop within 30s")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		code, body := get(t, url)
		if code == want {
			return body
		}
		last = body
	}
	t.Fatalf("%s never answered %d; last body %s", url, want, last)
	return ""
}

func TestServeBecomesReadyAndStopsCleanly(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	r := start(t)

	if code, body := get(t, r.base+"/healthz"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	body := waitStatus(t, r.base+"/readyz", 200)
	for _, dep := range []string{"postgres", "clickhouse", "redis", "kafka"} {
		if !strings.Contains(body, `"name":"`+dep+`","ok":true`) {
			t.Errorf("/readyz does not report %s ok: %s", dep, body)
		}
	}
	// A replica that made its own keys says so, once, naming every file.
	if logs := r.stderr.String(); strings.Count(logs, "generated new keys") != 1 ||
		!strings.Contains(logs, "jwt-ed25519.pem") || !strings.Contains(logs, "otp-hmac.key") || !strings.Contains(logs, "signing.key") {
		t.Errorf("no single log line about the generated keys:\n%s", logs)
	}
	code, body := get(t, r.base+"/no/such/path")
	if code != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Fatalf("unknown path: %d %s", code, body)
	}
	// The relay registers its lag gauge once Postgres is migrated.
	var metrics string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, metrics = get(t, r.base+"/metrics")
		if strings.Contains(metrics, "cfgd_relay_lag_events") {
			break
		}
	}
	for _, m := range []string{"cfgd_http_request_duration_seconds", "cfgd_relay_lag_events"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	r.stop(t)
	if !strings.Contains(r.stderr.String(), `"msg":"cfgd stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", r.stderr)
	}
}

func TestServeWithPostgresDownIsNotReady(t *testing.T) {
	baseEnv(t, "postgres://postgres@127.0.0.1:1/cfgd?connect_timeout=1")
	r := start(t)
	body := waitStatus(t, r.base+"/readyz", 503)
	if !strings.Contains(body, `{"name":"postgres","ok":false,"error":"unreachable"}`) || !strings.Contains(body, `"code":"unavailable"`) {
		t.Fatalf("/readyz should name postgres, unreachable: %s", body)
	}
	if strings.Contains(body, "127.0.0.1:1") || strings.Contains(body, "dial") {
		t.Fatalf("/readyz shows an error's text: %s", body)
	}
	if code, _ := get(t, r.base+"/healthz"); code != 200 {
		t.Fatalf("/healthz must stay 200 while a dependency is down, got %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.stderr.String(), `"dependency":"postgres"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line names the missing dependency:\n%s", r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(r.stderr.String(), "goroutine ") {
		t.Fatalf("a stack trace reached the log:\n%s", r.stderr)
	}
}

func TestBadSettingsExitWithCode2(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"bad address", map[string]string{"HTTP__ADDR": "localhost"}, []string{`HTTP__ADDR: expected host:port`}},
		{"bad partitions", map[string]string{"KAFKA__PARTITIONS": "many"}, []string{`KAFKA__PARTITIONS: expected an integer from 1 to 1024, got "many"`}},
		{"two problems, two lines", map[string]string{"REDIS__URL": "http://x", "LOG__LEVEL": "loud"},
			[]string{`REDIS__URL: expected a URL with scheme redis or rediss`, `LOG__LEVEL: expected one of debug, info, warn, error, got "loud"`}},
		{"unknown extension", map[string]string{"EXTENSIONS__ENABLED": "nope"}, []string{`EXTENSIONS__ENABLED:`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			baseEnv(t, "postgres://unused/cfgd")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errOut syncBuffer
			err := run(context.Background(), []string{"serve"}, &out, &errOut)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Fatalf("want exit code 2, got %v", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d lines, got %q", len(tc.want), lines)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"frobnicate"}, 2},
		{[]string{"serve", "extra"}, 2},
	}
	for _, tc := range tests {
		var out, errOut syncBuffer
		err := run(context.Background(), tc.args, &out, &errOut)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != tc.code {
			t.Errorf("%v: want exit %d, got %v", tc.args, tc.code, err)
		}
	}
	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"help"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "serve") {
		t.Errorf("help: %v %q", err, out.String())
	}
}

// With CLICKHOUSE__CLUSTER set, serve runs no ClickHouse DDL (ON CLUSTER
// waits for every server: `cfgd migrate` alone runs it): it starts, its
// pipeline runs, and the sink is not ready (it waits for the tables).
func TestServeCreatesNoClickHouseTablesOnACluster(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	opts, conn := testenv.ClickHouse(t)
	t.Setenv("CLICKHOUSE__URL", "clickhouse://"+opts.Addr[0]+"/"+opts.Auth.Database)
	t.Setenv("CLICKHOUSE__CLUSTER", "cfgd")
	r := start(t)
	var metrics string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, metrics = get(t, r.base+"/metrics")
		if strings.Contains(metrics, "cfgd_relay_lag_events") {
			break
		}
	}
	if !strings.Contains(metrics, "cfgd_relay_lag_events") {
		t.Fatal("the pipeline never started")
	}
	if body := waitStatus(t, r.base+"/readyz", 503); !strings.Contains(body, `"name":"requestlog-sink","ok":false`) {
		t.Errorf("/readyz does not name the sink: %s", body)
	}
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.tables WHERE database = currentDatabase()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("serve created %d tables in ClickHouse on a cluster", n)
	}
}
