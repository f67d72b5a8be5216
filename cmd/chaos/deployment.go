package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/otpmail"
	"github.com/cfgd/cfgd/cmd/internal/rig"
	"github.com/cfgd/cfgd/events/kafka"
)

// ClusterName is the cluster deploy/scripts/cluster/cluster.sh configures.
const clusterName = "cfgd"

// deployment is the system under test as docs/scaling.md deploys it, on this
// machine: its own ports (from base) and data under dir.
type deployment struct {
	dir    string
	bin    string // the cfgd binary
	script string // deploy/scripts/cluster/cluster.sh
	base   int
	hist   *history
	mail   *otpmail.Inbox
	sup    *supervisor

	env      map[string]string // shared by every cfgd process
	serveURL []string
	pg       *rig.Postgres
	pgURL    string
	chAddrs  map[string]string // node -> host:port
	staff    string            // Authorization header value of the staff user
	key      string            // the ingest API key
	keyID    int64
}

const staffEmail, staffPassword = "staff@chaos.example.com", "chaos staff password"

func (r *deployment) port(off int) int { return r.base + off }

// clusterEnv is the environment of cluster.sh: its data dir and ports.
func (r *deployment) clusterEnv() []string {
	return append(os.Environ(), "CFGD_DATA_DIR="+r.dir,
		"CFGD_CLUSTER_PORT_SHIFT="+strconv.Itoa(r.base-9000),
		"CFGD_CLUSTER_ZK_PORT="+strconv.Itoa(r.port(30)))
}

func (r *deployment) clusterScript(ctx context.Context, args ...string) error {
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

func (r *deployment) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(r.dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		panic(err) // the directory was made at the start
	}
	return f
}

func (r *deployment) appendLog(name string, b []byte) {
	f := r.logFile(name)
	defer f.Close()
	_, _ = f.Write(b)
}

// owned starts cmd in its own process group (so a kill reaches nothing of
// this program's) with its output in logs/<name>.log.
func (r *deployment) owned(name string, mk func() *exec.Cmd) func(context.Context) (*exec.Cmd, error) {
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

func (r *deployment) cfgdEnv(extra map[string]string) []string {
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
func (r *deployment) cli(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = r.cfgdEnv(nil)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	// One write a command, so that concurrent commands' output does not
	// interleave in the log.
	f := r.logFile("cli")
	defer f.Close()
	_, _ = fmt.Fprintf(f, "----- cfgd %s (%v, %s) -----\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), outcomeOf(err), errOut.Bytes())
	if err != nil {
		return out.String(), fmt.Errorf("cfgd %s: %w: %s", strings.Join(args, " "), err, lastLine(errOut.Bytes()))
	}
	return out.String(), nil
}

func outcomeOf(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// up starts everything, migrates and makes the staff user and the ingest
// API key.
func (r *deployment) up(ctx context.Context, say func(string, ...any)) error {
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
	if r.key, r.keyID, err = rig.ParseAPIKey(out); err != nil {
		return err
	}

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

func (r *deployment) chURL(nodes ...string) string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, r.chAddrs[n])
	}
	return fmt.Sprintf("clickhouse://%s/cfgd", strings.Join(addrs, ","))
}

// postgres makes a private cluster with initdb and returns it, not
// started.
func (r *deployment) postgres() (*component, error) {
	pg, err := rig.InitPostgres(filepath.Join(r.dir, "postgres"), r.port(0))
	if err != nil {
		return nil, err
	}
	r.pg = pg
	r.pgURL = pg.URL("cfgd")
	return &component{name: "postgres", tier: tierSingle, addr: fmt.Sprintf("127.0.0.1:%d", pg.Port), group: true,
		launch: r.owned("postgres", func() *exec.Cmd { return pg.Command(300, "64MB") })}, nil
}

func (r *deployment) createDatabase(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return r.pg.CreateDatabase(ctx, "cfgd")
}

// down stops everything this run started, by pid.
func (r *deployment) down() {
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
