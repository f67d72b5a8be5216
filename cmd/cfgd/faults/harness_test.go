// Package faults runs the real cfgd binary as a subprocess against real
// Postgres, ClickHouse, Redis and the Kafka-protocol broker, breaks one
// thing at a time (SIGKILL of the server, a dependency stopped under load)
// and checks what docs/operations.md promises: readiness tells the truth, cfgd
// recovers by itself, and nothing acknowledged is lost or doubled.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/rig"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// The binary is built once per test binary, with -race when the tests run
// with it.
var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func cfgdBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cfgd-faults-bin-")
		if buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "cfgd")
		args := []string{"build", "-o", bin}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool(), append(args, "github.com/cfgd/cfgd/cmd/cfgd")...)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build cfgd: %w\n%s", err, out)
			return
		}
		binPath = bin
		t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freePort returns a loopback port nothing listens on now, for a
// component that must come back on the same address after a stop (Redis,
// Postgres, ClickHouse, the broker). It is drawn below the kernel's
// ephemeral range (32768 and up on Linux), so while the component is down
// no outgoing connection of the machine is given its port.
func freePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		p := 20000 + mrand.IntN(12000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return p
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// logBuf keeps a subprocess's output and replays its tail into the test
// log when the test fails.
type logBuf struct {
	mu    sync.Mutex
	lines []string
	part  []byte
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.part = append(b.part, p...)
	for {
		i := bytes.IndexByte(b.part, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, string(b.part[:i]))
		b.part = b.part[i+1:]
	}
	return len(p), nil
}

func (b *logBuf) mark(s string) { _, _ = b.Write([]byte("----- " + s + " -----\n")) }

// dumpOnFailure logs the last lines of b when t has failed.
func (b *logBuf) dumpOnFailure(t testing.TB, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		from := max(0, len(b.lines)-300)
		t.Logf("%s output (last %d of %d lines):\n%s", name, len(b.lines)-from, len(b.lines), strings.Join(b.lines[from:], "\n"))
	})
}

// proc is a running subprocess whose exit is observed once.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	// Its own process group, so a kill reaches nothing of the test's.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p
}

// signal sends sig and waits up to timeout for the exit; a process still
// running then is killed.
func (p *proc) signal(t testing.TB, sig syscall.Signal, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	if sig == syscall.SIGKILL {
		// The whole group: a postmaster's backends go with it.
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	} else {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		t.Errorf("%s did not exit %s after %v", filepath.Base(p.cmd.Path), sig, timeout)
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// cfgd runs the binary with one environment: `cfgd serve` (restartable)
// and one-shot commands.
type cfgd struct {
	t    testing.TB
	bin  string
	env  []string
	logs *logBuf
	srv  *proc
	// base is http://host:port of the running serve; load goroutines
	// read it while a restart sets it.
	base atomic.Pointer[string]
	http *http.Client
}

func newCfgd(t testing.TB, env map[string]string) *cfgd {
	t.Helper()
	c := &cfgd{t: t, bin: cfgdBinary(t), logs: &logBuf{}, http: &http.Client{Timeout: 10 * time.Second}}
	dir := t.TempDir()
	base := map[string]string{
		"CFGD_ENV_FILE":          filepath.Join(dir, "no.env"),
		"HTTP__ADDR":             "127.0.0.1:0",
		"GRPC__ADDR":             "127.0.0.1:0",
		"KAFKA__EMBEDDED_ADDR":   "127.0.0.1:0",
		"KAFKA__DATA_DIR":        filepath.Join(dir, "kafka"),
		"KAFKA__PARTITIONS":      "4",
		"AUTH__KEYS_DIR":         filepath.Join(dir, "keys"),
		"MEDIA__DIR":             filepath.Join(dir, "media"),
		"HTTP__SHUTDOWN_TIMEOUT": "2s",
		"LOG__LEVEL":             "info",
		"OTP__IP_REQUESTS":       "1000000",
		"OTP__IP_VERIFICATIONS":  "1000000",
		// Small batches: the volumes here are small and the waits short.
		"REQUESTLOG__BATCH_WAIT": "100ms",
	}
	for k, v := range env {
		base[k] = v
	}
	c.env = os.Environ()
	for k, v := range base {
		c.env = append(c.env, k+"="+v)
	}
	c.logs.dumpOnFailure(t, "cfgd")
	t.Cleanup(func() {
		if c.srv != nil {
			c.srv.signal(t, syscall.SIGKILL, 10*time.Second)
		}
	})
	return c
}

// run runs a one-shot command and returns its standard output.
func (c *cfgd) run(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = c.logs
	c.logs.mark("cfgd " + strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("cfgd %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

var bannerAPI = regexp.MustCompile(`^\s+API\s+(http://\S+?)/?$`)

// start runs `cfgd serve` and returns once its HTTP listener is up (not
// ready: readiness is what the tests watch).
func (c *cfgd) start() {
	c.t.Helper()
	if c.srv != nil && c.srv.running() {
		c.t.Fatal("cfgd serve is already running")
	}
	cmd := exec.Command(c.bin, "serve")
	cmd.Env = c.env
	cmd.Stderr = c.logs
	// exec copies stdout through the writer and Wait waits for the copy,
	// so no line is lost at exit.
	addr := make(chan string, 1)
	cmd.Stdout = &bannerWriter{logs: c.logs, addr: addr}
	c.logs.mark("cfgd serve")
	c.srv = startProc(c.t, cmd)
	select {
	case a := <-addr:
		c.base.Store(&a)
	case <-c.srv.exited:
		c.t.Fatalf("cfgd serve exited at start: %v", c.srv.err)
	case <-time.After(60 * time.Second):
		c.t.Fatal("cfgd serve printed no address within 60s")
	}
}

func (c *cfgd) url() string {
	if p := c.base.Load(); p != nil {
		return *p
	}
	return "http://127.0.0.1:1"
}

// bannerWriter passes serve's standard output to the log and sends the
// API address of its banner on addr.
type bannerWriter struct {
	logs *logBuf
	addr chan string
	part []byte
}

func (w *bannerWriter) Write(p []byte) (int, error) {
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		line := string(w.part[:i])
		w.part = w.part[i+1:]
		_, _ = w.logs.Write([]byte(line + "\n"))
		if m := bannerAPI.FindStringSubmatch(line); m != nil {
			select {
			case w.addr <- m[1]:
			default:
			}
		}
	}
	return len(p), nil
}

// kill SIGKILLs serve: no shutdown code runs.
func (c *cfgd) kill() {
	c.t.Helper()
	c.logs.mark("SIGKILL")
	c.srv.signal(c.t, syscall.SIGKILL, 10*time.Second)
}

// readiness is the answer of /readyz: every check by name.
type readiness struct {
	Ready  bool
	Checks map[string]bool
}

func (r readiness) String() string {
	var bad []string
	for n, ok := range r.Checks {
		if !ok {
			bad = append(bad, n)
		}
	}
	return fmt.Sprintf("ready=%v failing=%v", r.Ready, bad)
}

func (c *cfgd) readyz() (readiness, error) {
	resp, err := c.http.Get(c.url() + "/readyz")
	if err != nil {
		return readiness{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return readiness{}, fmt.Errorf("readyz: %w", err)
	}
	r := readiness{Ready: resp.StatusCode == http.StatusOK && body.Status == "ready", Checks: map[string]bool{}}
	for _, ch := range body.Checks {
		r.Checks[ch.Name] = ch.OK
	}
	return r, nil
}

// waitReadiness polls /readyz until cond holds or timeout passes, and
// returns how long it took.
func (c *cfgd) waitReadiness(what string, timeout time.Duration, cond func(readiness) bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	var last readiness
	var lastErr error
	for time.Since(start) < timeout {
		r, err := c.readyz()
		if err == nil && cond(r) {
			return time.Since(start)
		}
		last, lastErr = r, err
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s: not within %v (last /readyz: %v, err %v)", what, timeout, last, lastErr)
	return 0
}

func (c *cfgd) waitReady(timeout time.Duration) time.Duration {
	c.t.Helper()
	return c.waitReadiness("cfgd ready", timeout, func(r readiness) bool { return r.Ready })
}

// post sends body as JSON with headers and decodes the answer into out
// (when non-nil); it returns the status code.
func (c *cfgd) post(ctx context.Context, path string, body any, headers map[string]string, out any) (int, error) {
	return rig.Do(ctx, c.http, http.MethodPost, c.url()+path, body, headers, out)
}

// get sends a GET with headers and returns the status code.
func (c *cfgd) get(ctx context.Context, path string, headers map[string]string) (int, error) {
	return rig.Do(ctx, c.http, http.MethodGet, c.url()+path, nil, headers, nil)
}

// apiKey creates a superuser and a service API key with the CLI and
// returns the key and its id.
func (c *cfgd) apiKey(email string) (string, int64) {
	c.t.Helper()
	c.run("user", "create-superuser", "--email", email)
	out := c.run("apikey", "create", "--name", "faults", "--type", "service", "--user", email)
	key, id, err := rig.ParseAPIKey(out)
	if err != nil {
		c.t.Fatal(err)
	}
	return key, id
}

// eventually polls cond every 200ms until it returns nil or timeout
// passes, then fails with its last error.
func eventually(t testing.TB, what string, timeout time.Duration, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// statusError is an answer other than 200.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("answered %d", int(e)) }

// overview reads the overview total through c's REST API with auth.
func (c *cfgd) overview(ctx context.Context, auth string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url()+"/api/grpc/monitor/overview/?hours=24", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", auth)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, statusError(resp.StatusCode)
	}
	var o requestlogview.Overview
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		return 0, fmt.Errorf("overview: %w", err)
	}
	return o.TotalRequests, nil
}
