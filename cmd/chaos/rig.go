package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
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

	"github.com/cfgd/cfgd/cmd/internal/otpmail"
	"github.com/cfgd/cfgd/events/kafka"
)

// ClusterName is the cluster deploy/scripts/cluster/cluster.sh configures.
const clusterName = "cfgd"

// rig is the system under test as docs/scaling.md deploys it, on this
// machine: its own ports (from base) and data under dir.
type rig struct {
	dir    string
	bin    string // the cfgd binary
	script string // deploy/scripts/cluster/cluster.sh
	base   int
	hist   *history
	mail   *otpmail.Inbox
	sup    *supervisor

	env      map[string]string // shared by every cfgd process
	serveURL []string
	pgURL    string
	chAddrs  map[string]string // node -> host:port
	staff    string            // Authorization header value of the staff user
	key      string            // the ingest API key
	keyID    int64
}

const staffEmail, staffPassword = "staff@chaos.example.com", "chaos staff password"

func (r *rig) port(off int) int { return r.base + off }

// clusterEnv is the environment of cluster.sh: its data dir and ports.
func (r *rig) clusterEnv() []string {
	return append(os.Environ(), "CFGD_DATA_DIR="+r.dir,
		"CFGD_CLUSTER_PORT_SHIFT="+strconv.Itoa(r.base-9000),
		"CFGD_CLUSTER_ZK_PORT="+strconv.Itoa(r.port(30)))
}

func (r *rig) clusterScript(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, r.script, args...)
	cmd.Env = r.clusterEnv()
	out, err := cmd.CombinedOutput()
	r.appendLog("cluster", out)
	if err != nil {
		return fmt.Errorf("cluster.sh %s: %w: %s", strings.Join(args, " "), err, lastLine(out))
	}
	return nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (r *rig) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(r.dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		panic(err) // the directory was made at the start
	}
	return f
}

func (r *rig) appendLog(name string, b []byte) {
	f := r.logFile(name)
	defer f.Close()
	_, _ = f.Write(b)
}

// owned starts cmd in its own process group (so a kill reaches nothing of
// this program's) with its output in logs/<name>.log.
func (r *rig) owned(name string, mk func() *exec.Cmd) func(context.Context) (*exec.Cmd, error) {
	return func(context.Context) (*exec.Cmd, error) {
		cmd := mk()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Setpgid = true
		f := r.logFile(name)
		fmt.Fprintf(f, "----- start %s -----\n", time.Now().UTC().Format(time.RFC3339Nano))
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, err
		}
		return cmd, nil
	}
}

func (r *rig) cfgdEnv(extra map[string]string) []string {
	env := os.Environ()
	for k, v := range r.env {
		env = append(env, k+"="+v)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// cli runs a one-shot cfgd command and returns its standard output.
func (r *rig) cli(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = r.cfgdEnv(nil)
	var out bytes.Buffer
	cmd.Stdout = &out
	f := r.logFile("cli")
	defer f.Close()
	fmt.Fprintf(f, "----- cfgd %s -----\n", strings.Join(args, " "))
	cmd.Stderr = f
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("cfgd %s: %w", strings.Join(args, " "), err)
	}
	return out.String(), nil
}

var apiKeyLine = regexp.MustCompile(`id=(\d+) `)

// up starts everything, migrates and makes the staff user and the ingest
// API key.
func (r *rig) up(ctx context.Context, say func(string, ...any)) error {
	for _, d := range []string{"logs", "kafka", "keys", "media", "redis"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return err
		}
	}
	r.chAddrs = map[string]string{}
	for i, n := range []string{"s1r1", "s1r2", "s2r1", "s2r2"} {
		r.chAddrs[n] = fmt.Sprintf("127.0.0.1:%d", r.port(101+i))
	}
	var comps []*component
	// ZooKeeper and the ClickHouse cluster.
	t := time.Now()
	if err := r.clusterScript(ctx, "up"); err != nil {
		return err
	}
	zk := &component{name: "zookeeper", tier: tierSingle, addr: fmt.Sprintf("127.0.0.1:%d", r.port(30)),
		pidFile: filepath.Join(r.dir, "cluster", "zookeeper.pid"),
		launch:  func(ctx context.Context) (*exec.Cmd, error) { return nil, r.clusterScript(ctx, "start", "zookeeper") }}
	comps = append(comps, zk)
	for _, n := range []string{"s1r1", "s1r2", "s2r1", "s2r2"} {
		tier := tierShard1
		if n[1] == '2' {
			tier = tierShard2
		}
		comps = append(comps, &component{name: n, tier: tier, addr: r.chAddrs[n],
			pidFile: filepath.Join(r.dir, "cluster", n+".pid"),
			launch:  func(ctx context.Context) (*exec.Cmd, error) { return nil, r.clusterScript(ctx, "start", n) }})
	}
	for _, c := range comps {
		pid, err := readPid(c.pidFile)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		c.pid = pid
	}
	say("ZooKeeper and 4 ClickHouse servers up (%v)", time.Since(t).Round(time.Millisecond))

	pg, err := r.postgres()
	if err != nil {
		return err
	}
	redis := &component{name: "redis", tier: tierSingle, addr: fmt.Sprintf("127.0.0.1:%d", r.port(1)),
		launch: r.owned("redis", func() *exec.Cmd {
			return exec.Command("redis-server", "--port", strconv.Itoa(r.port(1)), "--bind", "127.0.0.1",
				"--dir", filepath.Join(r.dir, "redis"), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
				"--protected-mode", "no")
		})}
	kafkaDir := filepath.Join(r.dir, "kafka")
	brokerAddr := fmt.Sprintf("127.0.0.1:%d", r.port(2))
	broker := &component{name: "broker", tier: tierSingle, addr: brokerAddr,
		launch: r.owned("broker", func() *exec.Cmd {
			cmd := exec.Command(r.bin, "broker")
			cmd.Env = append(os.Environ(), "CFGD_ENV_FILE="+filepath.Join(r.dir, "no.env"),
				"KAFKA__DATA_DIR="+kafkaDir, "KAFKA__EMBEDDED_ADDR="+brokerAddr, "KAFKA__PARTITIONS=4")
			return cmd
		})}
	for _, c := range []*component{pg, redis, broker} {
		if err := c.start(ctx); err != nil {
			return err
		}
		comps = append(comps, c)
	}
	if err := r.createDatabase(ctx); err != nil {
		return err
	}
	login, err := kafka.ReadEmbeddedLogin(kafkaDir)
	if err != nil {
		return err
	}
	say("Postgres, Redis and cfgd broker up")

	r.env = map[string]string{
		"CFGD_ENV_FILE":          filepath.Join(r.dir, "no.env"),
		"KAFKA__BROKERS":         brokerAddr,
		"KAFKA__SASL_MECHANISM":  login.Mechanism,
		"KAFKA__SASL_USERNAME":   login.User,
		"KAFKA__SASL_PASSWORD":   login.Password,
		"KAFKA__DATA_DIR":        kafkaDir,
		"KAFKA__PARTITIONS":      "4",
		"AUTH__KEYS_DIR":         filepath.Join(r.dir, "keys"),
		"MEDIA__DIR":             filepath.Join(r.dir, "media"),
		"POSTGRES__URL":          r.pgURL,
		"REDIS__URL":             fmt.Sprintf("redis://127.0.0.1:%d/0", r.port(1)),
		"CLICKHOUSE__CLUSTER":    clusterName,
		"CLICKHOUSE__URL":        r.chURL("s1r1", "s2r1", "s1r2", "s2r2"),
		"HTTP__SHUTDOWN_TIMEOUT": "2s",
		"LOG__LEVEL":             "info",
		"OTP__IP_REQUESTS":       "1000000",
		"OTP__IP_VERIFICATIONS":  "1000000",
		"REQUESTLOG__BATCH_WAIT": "100ms",
		"TASKS__HEARTBEAT":       "500ms",
	}
	maps.Copy(r.env, r.mail.Env())
	t = time.Now()
	if _, err := r.cli(ctx, 3*time.Minute, "migrate"); err != nil {
		return err
	}
	say("cfgd migrate on cluster %q (%v)", clusterName, time.Since(t).Round(time.Millisecond))
	if _, err := r.cli(ctx, time.Minute, "user", "create-superuser", "--email", staffEmail, "--password", staffPassword); err != nil {
		return err
	}
	r.staff = basicAuth(staffEmail, staffPassword)
	out, err := r.cli(ctx, time.Minute, "apikey", "create", "--name", "chaos-ingest", "--type", "service", "--user", staffEmail)
	if err != nil {
		return err
	}
	m := apiKeyLine.FindStringSubmatch(out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if m == nil || len(lines) < 2 {
		return fmt.Errorf("cfgd apikey create printed %q", out)
	}
	r.keyID, _ = strconv.ParseInt(m[1], 10, 64)
	r.key = strings.TrimSpace(lines[len(lines)-1])

	// Two serve replicas, each reaching the cluster through another
	// server first; started one at a time (the first makes the keys).
	order := [][]string{{"s1r1", "s2r1", "s1r2", "s2r2"}, {"s2r2", "s1r2", "s2r1", "s1r1"}}
	for i := range 2 {
		httpAddr := fmt.Sprintf("127.0.0.1:%d", r.port(10+i))
		extra := map[string]string{
			"REPLICA__ID":     fmt.Sprintf("replica-%d", i),
			"HTTP__ADDR":      httpAddr,
			"GRPC__ADDR":      fmt.Sprintf("127.0.0.1:%d", r.port(20+i)),
			"CLICKHOUSE__URL": r.chURL(order[i]...),
		}
		name := fmt.Sprintf("serve-%d", i)
		c := &component{name: name, tier: tierServe, addr: httpAddr, group: true,
			launch: r.owned(name, func() *exec.Cmd {
				cmd := exec.Command(r.bin, "serve")
				cmd.Env = r.cfgdEnv(extra)
				return cmd
			})}
		if err := c.start(ctx); err != nil {
			return err
		}
		comps = append(comps, c)
		r.serveURL = append(r.serveURL, "http://"+httpAddr)
	}
	worker := &component{name: "worker", tier: tierWorker, group: true,
		launch: r.owned("worker", func() *exec.Cmd {
			cmd := exec.Command(r.bin, "worker")
			cmd.Env = r.cfgdEnv(map[string]string{"TASKS__WORKER_ID": workerID, "HTTP__ADDR": "127.0.0.1:0", "GRPC__ADDR": "127.0.0.1:0"})
			return cmd
		})}
	if err := worker.start(ctx); err != nil {
		return err
	}
	comps = append(comps, worker)
	r.sup = &supervisor{comps: comps, hist: r.hist, restarting: map[string]bool{}, exits: map[string]int{}}
	return nil
}

func (r *rig) chURL(nodes ...string) string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, r.chAddrs[n])
	}
	return fmt.Sprintf("clickhouse://%s/cfgd", strings.Join(addrs, ","))
}

// postgres makes a private cluster with initdb (as the postgres user when
// run as root: Postgres refuses root) and returns it, not started.
func (r *rig) postgres() (*component, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, fmt.Errorf("no /usr/lib/postgresql/*/bin/initdb (run make stack-up)")
	}
	pgbin := filepath.Dir(bins[len(bins)-1])
	dir := filepath.Join(r.dir, "postgres")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	as := func(cmd *exec.Cmd) *exec.Cmd {
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	data := filepath.Join(dir, "data")
	initdb := as(exec.Command(filepath.Join(pgbin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"))
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port := r.port(0)
	r.pgURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/cfgd?sslmode=disable", port)
	return &component{name: "postgres", tier: tierSingle, addr: fmt.Sprintf("127.0.0.1:%d", port), group: true,
		launch: r.owned("postgres", func() *exec.Cmd {
			return as(exec.Command(filepath.Join(pgbin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=64MB"))
		})}, nil
}

func (r *rig) createDatabase(ctx context.Context) error {
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", r.port(0))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var conn *pgx.Conn
	var err error
	for {
		if conn, err = pgx.Connect(ctx, admin); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("private postgres: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE cfgd")
	return err
}

// down stops everything this run started, by pid.
func (r *rig) down() {
	if r.sup != nil {
		// cfgd first, then what it uses.
		for _, name := range []string{"worker", "serve-0", "serve-1", "broker", "redis", "postgres"} {
			if c := r.sup.byName(name); c != nil {
				c.stop(30 * time.Second)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.sup != nil {
		for _, c := range r.sup.comps {
			if c.pidFile != "" {
				_ = c.signal(syscall.SIGCONT)
			}
		}
	}
	_ = r.clusterScript(ctx, "down")
}
