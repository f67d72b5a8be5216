package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// The shortened windows: the sink's retention runs every minute with one
// day kept, completed tasks are kept a minute. The idempotency TTL (24 h)
// and its sweep interval (a minute) are constants of
// readmodels/requestlogview, not settings (see sweeps.go).
const (
	retentionEvery = time.Minute
	retentionDays  = 1
)

// stack is the run's own databases on the local stack, its cfgd
// processes and the mailbox their OTP codes go to.
type stack struct {
	o        options
	dir      string
	pgName   string
	pgAdmin  *pgx.Conn
	pg       *pgxpool.Pool
	ch       driver.Conn
	chDB     string
	redisDB  int
	redisKey string
	rdb      *redis.Client
	mail     *otpmail.Inbox
	base     string // http://host:port of serve
	env      []string
	cliEnv   []string // env plus the embedded broker's address and login
	serve    *child
	worker   *child
}

// redisClaim is the key (in database 0) the tests' testenv.RedisDB
// claims a database with; the soak takes one the same way so a test run
// beside it never flushes its queues.
const redisClaimKey = "cfgd-test:redis-db:%d"

func newStack(ctx context.Context, o options, dir, stamp string) (*stack, error) {
	s := &stack{o: o, dir: dir, pgName: "soak_" + strings.ReplaceAll(stamp, "-", "_"), chDB: "soak_" + strings.ReplaceAll(stamp, "-", "_")}
	var err error
	if s.pgAdmin, err = pgx.Connect(ctx, o.pgAdmin); err != nil {
		return nil, fmt.Errorf("postgres (make stack-up): %w", err)
	}
	if _, err := s.pgAdmin.Exec(ctx, "CREATE DATABASE "+s.pgName); err != nil {
		return nil, fmt.Errorf("create database %s: %w", s.pgName, err)
	}
	if s.ch, err = clickhouse.Open(&clickhouse.Options{Addr: []string{o.clickhouse}}); err != nil {
		return nil, fmt.Errorf("clickhouse: %w", err)
	}
	if err := s.claimRedis(ctx); err != nil {
		return nil, err
	}
	if s.mail, err = otpmail.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) claimRedis(ctx context.Context) error {
	admin := redis.NewClient(&redis.Options{Addr: s.o.redis})
	defer admin.Close()
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	for db := 15; db > 0; db-- {
		key := fmt.Sprintf(redisClaimKey, db)
		ok, err := admin.SetNX(ctx, key, "soak-"+hex.EncodeToString(token), s.o.duration+time.Hour).Result()
		if err != nil {
			return fmt.Errorf("redis (make stack-up): %w", err)
		}
		if ok {
			s.redisDB, s.redisKey = db, key
			s.rdb = redis.NewClient(&redis.Options{Addr: s.o.redis, DB: db})
			return s.rdb.FlushDB(ctx).Err()
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

// start migrates the run's databases and starts serve, then the worker.
func (s *stack) start(ctx context.Context) error {
	httpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	grpcAddr, _ := freeAddr()
	kafkaAddr, _ := freeAddr()
	s.base = "http://" + httpAddr
	kafkaDir := filepath.Join(s.dir, "kafka")
	settings := map[string]string{
		"CFGD_ENV_FILE":               filepath.Join(s.dir, "no.env"),
		"HTTP__ADDR":                  httpAddr,
		"GRPC__ADDR":                  grpcAddr,
		"GRPC__PROTO_DIR":             filepath.Join(s.dir, "protos"),
		"KAFKA__EMBEDDED_ADDR":        kafkaAddr,
		"KAFKA__DATA_DIR":             kafkaDir,
		"AUTH__KEYS_DIR":              filepath.Join(s.dir, "keys"),
		"MEDIA__DIR":                  filepath.Join(s.dir, "media"),
		"POSTGRES__URL":               fmt.Sprintf("postgres:///%s?host=/var/run/postgresql&user=postgres", s.pgName),
		"CLICKHOUSE__URL":             fmt.Sprintf("clickhouse://%s/%s", s.o.clickhouse, s.chDB),
		"REDIS__URL":                  fmt.Sprintf("redis://%s/%d", s.o.redis, s.redisDB),
		"OTP__IP_REQUESTS":            "1000000",
		"OTP__IP_VERIFICATIONS":       "1000000",
		"CLICKHOUSE__RETENTION_DAYS":  fmt.Sprint(retentionDays),
		"REQUESTLOG__RETENTION_EVERY": retentionEvery.String(),
		"TASKS__RETENTION":            "1m",
		"LOG__LEVEL":                  "info",
	}
	for k, v := range s.mail.Env() {
		settings[k] = v
	}
	s.env = os.Environ()
	for k, v := range settings {
		s.env = append(s.env, k+"="+v)
	}
	if _, err := s.cli(ctx, s.env, "migrate"); err != nil {
		return err
	}
	if s.pg, err = pgxpool.New(ctx, settings["POSTGRES__URL"]); err != nil {
		return err
	}
	if s.serve, err = s.spawn("serve", s.env, "serve"); err != nil {
		return err
	}
	if err := s.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	login, err := kafka.ReadEmbeddedLogin(kafkaDir)
	if err != nil {
		return err
	}
	s.cliEnv = append(append([]string{}, s.env...), "KAFKA__BROKERS="+kafkaAddr, "KAFKA__SASL_MECHANISM="+login.Mechanism,
		"KAFKA__SASL_USERNAME="+login.User, "KAFKA__SASL_PASSWORD="+login.Password)
	if s.worker, err = s.spawn("worker", s.cliEnv, "worker"); err != nil {
		return err
	}
	fmt.Printf("soak: cfgd serve pid %d at %s, cfgd worker pid %d; Postgres %s, ClickHouse %s, Redis db %d\n",
		s.serve.cmd.Process.Pid, s.base, s.worker.cmd.Process.Pid, s.pgName, s.chDB, s.redisDB)
	return nil
}

func (s *stack) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.serve.exited:
			return fmt.Errorf("cfgd serve exited at start (%v): see %s", s.serve.err, s.serve.log)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("cfgd serve not ready within %v: see %s", timeout, s.serve.log)
}

// cli runs a one-shot cfgd command and returns its standard output.
func (s *stack) cli(ctx context.Context, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.o.cfgd, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cfgd %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// child is a long-running cfgd process; its output goes to a file in the
// run's directory.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

func (s *stack) spawn(name string, env []string, args ...string) (*child, error) {
	path := filepath.Join(s.dir, name+".log")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.o.cfgd, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C of make reaches the soak, which
	// stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c := &child{name: name, cmd: cmd, log: path, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process (by its pid) and waits; SIGKILL after
// 30 s.
func (c *child) stop() {
	if c == nil || !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func (s *stack) close(keep bool) {
	s.worker.stop()
	s.serve.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.pg != nil {
		s.pg.Close()
	}
	if !keep {
		if _, err := s.pgAdmin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.pgName+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "soak: drop postgres database:", err)
		}
		if err := s.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+s.chDB); err != nil {
			fmt.Fprintln(os.Stderr, "soak: drop clickhouse database:", err)
		}
	} else {
		fmt.Printf("soak: kept Postgres database %s and ClickHouse database %s\n", s.pgName, s.chDB)
	}
	_ = s.pgAdmin.Close(ctx)
	_ = s.ch.Close()
	if s.rdb != nil {
		_ = s.rdb.FlushDB(ctx).Err()
		_ = s.rdb.Close()
		admin := redis.NewClient(&redis.Options{Addr: s.o.redis})
		_ = admin.Del(ctx, s.redisKey).Err()
		_ = admin.Close()
	}
	s.mail.Close()
}
