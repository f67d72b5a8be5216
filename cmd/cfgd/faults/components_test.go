package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/cmd/internal/otpmail"
	"github.com/cfgd/cfgd/cmd/internal/rig"
	"github.com/cfgd/cfgd/events/kafka"
)

// localClickHouse is a fresh database on the local stack's ClickHouse.
func localClickHouse(t testing.TB) string {
	t.Helper()
	opts, _ := testenv.ClickHouse(t)
	return fmt.Sprintf("clickhouse://%s/%s", opts.Addr[0], opts.Auth.Database)
}

// waitTCP waits until something accepts connections on addr.
func waitTCP(t testing.TB, what, addr string, timeout time.Duration, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited at start", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s is not listening on %s after %v", what, addr, timeout)
}

// server is a private, stoppable instance of a dependency: the same data
// and address on every start.
type server struct {
	t     testing.TB
	name  string
	addr  string
	cmd   func() *exec.Cmd
	stopS syscall.Signal
	up    func()
	logs  *logBuf
	p     *proc
}

func newServer(t testing.TB, name, addr string, stop syscall.Signal, cmd func() *exec.Cmd) *server {
	s := &server{t: t, name: name, addr: addr, cmd: cmd, stopS: stop, logs: &logBuf{}}
	s.logs.dumpOnFailure(t, name)
	t.Cleanup(func() {
		if s.p != nil {
			s.p.signal(t, syscall.SIGKILL, 10*time.Second)
		}
	})
	return s
}

func (s *server) start() {
	s.t.Helper()
	cmd := s.cmd()
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	s.logs.mark("start")
	s.p = startProc(s.t, cmd)
	waitTCP(s.t, s.name, s.addr, 60*time.Second, s.p.exited)
	if s.up != nil {
		s.up()
	}
}

// stop shuts the server down the ordinary way and waits for it.
func (s *server) stop() {
	s.t.Helper()
	s.logs.mark("stop")
	s.p.signal(s.t, s.stopS, 30*time.Second)
}

// startRedis starts a private redis-server with an append-only file, so a
// stop and start keeps what it held (as a production Redis would).
func startRedis(t testing.TB) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	s := newServer(t, "redis", fmt.Sprintf("127.0.0.1:%d", port), syscall.SIGTERM, func() *exec.Cmd {
		return exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no")
	})
	s.start()
	return s, fmt.Sprintf("redis://127.0.0.1:%d/0", port)
}

// startPostgres makes a private cluster with initdb and starts it on a
// free port with its socket in its own directory. Postgres refuses to run
// as root, so then it runs as the postgres user (as deploy/scripts/local/stack.sh
// does). It returns the URL of a database cfgd, created empty.
func startPostgres(t testing.TB) (*server, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cfgd-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg, err := rig.InitPostgres(dir, freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "postgres", fmt.Sprintf("127.0.0.1:%d", pg.Port), syscall.SIGINT, func() *exec.Cmd {
		return pg.Command(200, "32MB")
	})
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pg.CreateDatabase(ctx, "cfgd"); err != nil {
		t.Fatal(err)
	}
	return s, pg.URL("cfgd")
}

// startClickHouse runs a private clickhouse-server with a minimal config
// (the shape deploy/scripts/local/stack.sh writes) on free ports.
func startClickHouse(t testing.TB) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tcp, httpPort := freePort(t), freePort(t)
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><console>1</console></logger>
    <http_port>%d</http_port>
    <tcp_port>%d</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <path>%[3]s/data/</path>
    <tmp_path>%[3]s/tmp/</tmp_path>
    <user_files_path>%[3]s/user_files/</user_files_path>
    <format_schema_path>%[3]s/format_schemas/</format_schema_path>
    <users_config>%[3]s/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>67108864</mark_cache_size>
    <timezone>UTC</timezone>
</yandex>
`, httpPort, tcp, dir)
	users := `<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default></default></quotas>
</yandex>
`
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("clickhouse-server")
	if err != nil {
		bin = "/usr/sbin/clickhouse-server"
	}
	s := newServer(t, "clickhouse", fmt.Sprintf("127.0.0.1:%d", tcp), syscall.SIGTERM, func() *exec.Cmd {
		return exec.Command(bin, "--config-file="+filepath.Join(dir, "config.xml"))
	})
	s.start()
	return s, fmt.Sprintf("clickhouse://127.0.0.1:%d/default", tcp)
}

// startBroker runs `cfgd broker` (the embedded Kafka broker alone) on a
// fixed port and returns the settings that make serve use it as an
// external cluster: KAFKA__BROKERS and the login from its client.properties.
func startBroker(t testing.TB) (*server, map[string]string) {
	t.Helper()
	bin := cfgdBinary(t)
	return startBrokerOf(t, func() string { return bin })
}

// startBrokerOf is startBroker with the binary bin names at each start
// (an upgrade restarts the broker with another build).
func startBrokerOf(t testing.TB, bin func() string) (*server, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "kafka")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := append(os.Environ(), "CFGD_ENV_FILE="+filepath.Join(dir, "no.env"), "KAFKA__DATA_DIR="+data, "KAFKA__EMBEDDED_ADDR="+addr)
	s := newServer(t, "broker", addr, syscall.SIGTERM, func() *exec.Cmd {
		cmd := exec.Command(bin(), "broker")
		cmd.Env = env
		return cmd
	})
	s.start()
	login, err := kafka.ReadEmbeddedLogin(data)
	if err != nil {
		t.Fatal(err)
	}
	return s, map[string]string{
		"KAFKA__BROKERS": addr, "KAFKA__SASL_MECHANISM": login.Mechanism,
		"KAFKA__SASL_USERNAME": login.User, "KAFKA__SASL_PASSWORD": login.Password,
		// The event signing key file is kept beside it.
		"KAFKA__DATA_DIR": data,
	}
}

// mailbox is the users' inboxes: an in-process SMTP server keeping the
// last OTP code sent to each address (cmd/internal/otpmail).
type mailbox = otpmail.Inbox

// startMailbox starts one, stopped when t ends.
func startMailbox(t testing.TB) *mailbox {
	t.Helper()
	m, err := otpmail.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}
