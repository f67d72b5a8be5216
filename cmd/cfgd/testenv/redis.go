package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisClaim is how long a test may hold a Redis database; a test binary
// killed before its cleanup frees it after this.
const redisClaim = 15 * time.Minute

// RedisDB gives t a Redis database of its own on the server of base (a
// redis:// URL): one of databases 1 to 15, claimed with a key in database 0
// (SET NX, so parallel tests of every package get different ones),
// flushed, and freed when t ends. asynq keeps per-database sets (its list
// of queues, the servers), which key prefixes cannot keep apart. It
// returns the client and its URL.
func RedisDB(t testing.TB, base string) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatalf("testenv: redis url %q: %v", base, err)
	}
	ctx := context.Background()
	admin := redis.NewClient(withDB(opts, 0))
	defer admin.Close()
	token := randomName("claim-")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for db := 1; db < 16; db++ {
			key := fmt.Sprintf("cfgd-test:redis-db:%d", db)
			ok, err := admin.SetNX(ctx, key, token, redisClaim).Result()
			if err != nil {
				t.Fatalf("testenv: claim redis db: %v", err)
			}
			if !ok {
				continue
			}
			c := redis.NewClient(withDB(opts, db))
			if err := c.FlushDB(ctx).Err(); err != nil {
				t.Fatalf("testenv: flush redis db %d: %v", db, err)
			}
			t.Cleanup(func() {
				_ = c.FlushDB(context.Background()).Err()
				_ = c.Close()
				rel := redis.NewClient(withDB(opts, 0))
				defer rel.Close()
				// Free it only if the claim is still ours.
				if v, err := rel.Get(context.Background(), key).Result(); err == nil && v == token {
					_ = rel.Del(context.Background(), key).Err()
				}
			})
			u := fmt.Sprintf("redis://%s/%d", opts.Addr, db)
			if opts.Password != "" {
				u = fmt.Sprintf("redis://:%s@%s/%d", opts.Password, opts.Addr, db)
			}
			return c, u
		}
		if time.Now().After(deadline) {
			t.Fatal("testenv: every Redis database 1-15 is claimed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func withDB(o *redis.Options, db int) *redis.Options {
	c := *o
	c.DB = db
	return &c
}

// RedisServer is a private redis-server on a port of its own, for tests
// that stop Redis under load; it keeps nothing on disk, so a restart
// starts empty apart from what the test writes again.
type RedisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedisServer starts one; it is killed when t ends.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &RedisServer{t: t, port: port}
	s.Start()
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// URL is the server's database 0.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Start runs the server (again), with extra redis-server arguments, and
// waits until it answers.
func (s *RedisServer) Start(extra ...string) {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"}, extra...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("testenv: redis-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testenv: redis-server on %d did not come up", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down and waits for it.
func (s *RedisServer) Stop() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}
