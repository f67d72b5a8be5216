// Package servestack runs a cfgd serve (with its embedded Kafka broker),
// and a cfgd worker when asked, on databases of their own on the local
// stack: what make soak and the serve ingest bench (cmd/loadgen -serve)
// both start, sample and tear down.
package servestack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/cmd/internal/otpmail"
	"github.com/cfgd/cfgd/events/kafka"
)

// Options are where the stack runs and what it runs.
type Options struct {
	Cfgd       string // the cfgd binary
	Postgres   string // the local stack's Postgres (a database is created on it)
	ClickHouse string // the local stack's ClickHouse, host:port of its native protocol
	Redis      string // the local stack's Redis, host:port
	// Name prefixes the run's database names and its messages ("soak").
	Name string
	// Hold is how long the run's Redis database stays claimed at most (a
	// run that dies leaves it claimed no longer).
	Hold time.Duration
	// Settings are added to (or override) the run's cfgd settings.
	Settings map[string]string
	// Worker starts a cfgd worker beside serve.
	Worker bool
}

// Stack is the run's own databases on the local stack, its cfgd
// processes and the mailbox their OTP codes go to.
type Stack struct {
	o        Options
	dir      string
	PGName   string
	pgAdmin  *pgx.Conn
	PG       *pgxpool.Pool
	CH       driver.Conn
	CHDB     string
	redisDB  int
	redisKey string
	Rdb      *redis.Client
	Mail     *otpmail.Inbox
	Base     string // http://host:port of serve
	GRPCAddr string // host:port of serve's gRPC server
	Env      []string
	CLIEnv   []string // Env plus the embedded broker's address and login
	Serve    *Child
	Worker   *Child
}

// redisClaimKey is the key (in database 0) the tests' testenv.RedisDB
// claims a database with; a stack takes one the same way so a test run
// beside it never flushes its queues.
const redisClaimKey = "cfgd-test:redis-db:%d"

// New creates the run's databases (named o.Name + "_" + stamp) and its
// mailbox; dir is where the processes' files and logs go.
func New(ctx context.Context, o Options, dir, stamp string) (*Stack, error) {
	name := o.Name + "_" + strings.ReplaceAll(stamp, "-", "_")
	s := &Stack{o: o, dir: dir, PGName: name, CHDB: name}
	var err error
	if s.pgAdmin, err = pgx.Connect(ctx, o.Postgres); err != nil {
		return nil, fmt.Errorf("postgres (make stack-up): %w", err)
	}
	if _, err := s.pgAdmin.Exec(ctx, "CREATE DATABASE "+s.PGName); err != nil {
		return nil, fmt.Errorf("create database %s: %w", s.PGName, err)
	}
	if s.CH, err = clickhouse.Open(&clickhouse.Options{Addr: []string{o.ClickHouse}}); err != nil {
		return nil, fmt.Errorf("clickhouse: %w", err)
	}
	if err := s.claimRedis(ctx); err != nil {
		return nil, err
	}
	if s.Mail, err = otpmail.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) claimRedis(ctx context.Context) error {
	admin := redis.NewClient(&redis.Options{Addr: s.o.Redis})
	defer admin.Close()
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	for db := 15; db > 0; db-- {
		key := fmt.Sprintf(redisClaimKey, db)
		ok, err := admin.SetNX(ctx, key, s.o.Name+"-"+hex.EncodeToString(token), s.o.Hold+time.Hour).Result()
		if err != nil {
			return fmt.Errorf("redis (make stack-up): %w", err)
		}
		if ok {
			s.redisDB, s.redisKey = db, key
			s.Rdb = redis.NewClient(&redis.Options{Addr: s.o.Redis, DB: db})
			return s.Rdb.FlushDB(ctx).Err()
		}
	}
	return fmt.Errorf("every Redis database 1-15 is claimed")
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start migrates the run's databases and starts serve, then the worker
// when asked.
func (s *Stack) Start(ctx context.Context) error {
	httpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	s.GRPCAddr, _ = freeAddr()
	kafkaAddr, _ := freeAddr()
	s.Base = "http://" + httpAddr
	kafkaDir := filepath.Join(s.dir, "kafka")
	settings := map[string]string{
		"CFGD_ENV_FILE":         filepath.Join(s.dir, "no.env"),
		"HTTP__ADDR":            httpAddr,
		"GRPC__ADDR":            s.GRPCAddr,
		"GRPC__PROTO_DIR":       filepath.Join(s.dir, "protos"),
		"KAFKA__EMBEDDED_ADDR":  kafkaAddr,
		"KAFKA__DATA_DIR":       kafkaDir,
		"AUTH__KEYS_DIR":        filepath.Join(s.dir, "keys"),
		"MEDIA__DIR":            filepath.Join(s.dir, "media"),
		"POSTGRES__URL":         fmt.Sprintf("postgres:///%s?host=/var/run/postgresql&user=postgres", s.PGName),
		"CLICKHOUSE__URL":       fmt.Sprintf("clickhouse://%s/%s", s.o.ClickHouse, s.CHDB),
		"REDIS__URL":            fmt.Sprintf("redis://%s/%d", s.o.Redis, s.redisDB),
		"OTP__IP_REQUESTS":      "1000000",
		"OTP__IP_VERIFICATIONS": "1000000",
		"LOG__LEVEL":            "info",
	}
	for k, v := range s.Mail.Env() {
		settings[k] = v
	}
	for k, v := range s.o.Settings {
		settings[k] = v
	}
	s.Env = os.Environ()
	for k, v := range settings {
		s.Env = append(s.Env, k+"="+v)
	}
	if _, err := s.CLI(ctx, s.Env, "migrate"); err != nil {
		return err
	}
	if s.PG, err = pgxpool.New(ctx, settings["POSTGRES__URL"]); err != nil {
		return err
	}
	if s.Serve, err = s.spawn("serve", s.Env, "serve"); err != nil {
		return err
	}
	if err := s.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	login, err := kafka.ReadEmbeddedLogin(kafkaDir)
	if err != nil {
		return err
	}
	s.CLIEnv = append(append([]string{}, s.Env...), "KAFKA__BROKERS="+kafkaAddr, "KAFKA__SASL_MECHANISM="+login.Mechanism,
		"KAFKA__SASL_USERNAME="+login.User, "KAFKA__SASL_PASSWORD="+login.Password)
	if !s.o.Worker {
		fmt.Printf("%s: cfgd serve pid %d at %s (gRPC %s); Postgres %s, ClickHouse %s, Redis db %d\n",
			s.o.Name, s.Serve.Cmd.Process.Pid, s.Base, s.GRPCAddr, s.PGName, s.CHDB, s.redisDB)
		return nil
	}
	if s.Worker, err = s.spawn("worker", s.CLIEnv, "worker"); err != nil {
		return err
	}
	fmt.Printf("%s: cfgd serve pid %d at %s, cfgd worker pid %d; Postgres %s, ClickHouse %s, Redis db %d\n",
		s.o.Name, s.Serve.Cmd.Process.Pid, s.Base, s.Worker.Cmd.Process.Pid, s.PGName, s.CHDB, s.redisDB)
	return nil
}

func (s *Stack) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.Base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.Serve.exited:
			return fmt.Errorf("cfgd serve exited at start (%v): see %s", s.Serve.err, s.Serve.Log)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("cfgd serve not ready within %v: see %s", timeout, s.Serve.Log)
}

// CLI runs a one-shot cfgd command with env and returns its standard
// output.
func (s *Stack) CLI(ctx context.Context, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.o.Cfgd, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cfgd %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Child is a long-running cfgd process; its output goes to a file in the
// run's directory.
type Child struct {
	Name   string
	Cmd    *exec.Cmd
	Log    string
	exited chan struct{}
	err    error
}

func (s *Stack) spawn(name string, env []string, args ...string) (*Child, error) {
	path := filepath.Join(s.dir, name+".log")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.o.Cfgd, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C of make reaches the driver, which
	// stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c := &Child{Name: name, Cmd: cmd, Log: path, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.exited)
	}()
	return c, nil
}

// Running says whether the process has not exited.
func (c *Child) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Pid is the process's id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Stop sends SIGTERM to the process (by its pid) and waits; SIGKILL after
// 30 s.
func (c *Child) Stop() {
	if c == nil || !c.Running() {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.Cmd.Process.Kill()
		<-c.exited
	}
}

// Close stops the processes and drops the run's databases (unless keep)
// and frees its Redis database.
func (s *Stack) Close(keep bool) {
	s.Worker.Stop()
	s.Serve.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.PG != nil {
		s.PG.Close()
	}
	if !keep {
		if _, err := s.pgAdmin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.PGName+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "%s: drop postgres database: %v\n", s.o.Name, err)
		}
		if err := s.CH.Exec(ctx, "DROP DATABASE IF EXISTS "+s.CHDB); err != nil {
			fmt.Fprintf(os.Stderr, "%s: drop clickhouse database: %v\n", s.o.Name, err)
		}
	} else {
		fmt.Printf("%s: kept Postgres database %s and ClickHouse database %s\n", s.o.Name, s.PGName, s.CHDB)
	}
	_ = s.pgAdmin.Close(ctx)
	_ = s.CH.Close()
	if s.Rdb != nil {
		_ = s.Rdb.FlushDB(ctx).Err()
		_ = s.Rdb.Close()
		admin := redis.NewClient(&redis.Options{Addr: s.o.Redis})
		_ = admin.Del(ctx, s.redisKey).Err()
		_ = admin.Close()
	}
	s.Mail.Close()
}

// ProcStatus reads a field of /proc/<pid>/status (kB for VmRSS and
// VmHWM); NaN when it cannot.
func ProcStatus(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			if err != nil {
				return math.NaN()
			}
			return f
		}
	}
	return math.NaN()
}
