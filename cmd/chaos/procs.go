package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Tiers: the nemesis never takes down every member of a replicated tier
// at once, and a single-instance component goes down alone.
const (
	tierSingle = "single" // broker, Postgres, Redis, ZooKeeper
	tierServe  = "serve"
	tierShard1 = "shard1"
	tierShard2 = "shard2"
	tierWorker = "worker" // one process, but nothing waits on it synchronously
)

// component is one supervised process. Owned processes (launched here)
// are waited for; daemons (the ClickHouse servers and ZooKeeper, started
// by deploy/scripts/cluster/cluster.sh) are known by their pid file.
// Every signal goes to a pid, never to a name.
type component struct {
	name string
	tier string
	addr string // host:port that accepts connections once it is up; "" for none
	// group: signals go to the process group (a postmaster and its backends).
	group bool
	// launch starts the process; for an owned one it returns its command.
	launch func(ctx context.Context) (*exec.Cmd, error)
	// pidFile names the pid of a daemon.
	pidFile string

	mu      sync.Mutex
	pid     int
	exited  chan struct{} // closed when an owned process ends
	expect  bool          // down on purpose (killed by the nemesis, or the run ends)
	faulted bool          // a fault of the nemesis is on it now
	since   time.Time     // when the fault on it began
	spans   [][2]time.Time
	kills   []time.Time // when it died: a kill -9, or an exit of its own
}

// start launches the component and waits until it accepts connections.
func (c *component) start(ctx context.Context) error {
	cmd, err := c.launch(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	exited := make(chan struct{})
	pid := 0
	if cmd != nil {
		pid = cmd.Process.Pid
		go func() {
			_ = cmd.Wait()
			// The log file owned gave it.
			if f, ok := cmd.Stdout.(io.Closer); ok {
				_ = f.Close()
			}
			close(exited)
		}()
	} else {
		if pid, err = readPid(c.pidFile); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		exited = nil
	}
	c.mu.Lock()
	c.pid, c.exited, c.expect = pid, exited, false
	c.mu.Unlock()
	if c.addr == "" {
		return nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", c.addr, 300*time.Millisecond); err == nil {
			_ = conn.Close()
			return nil
		}
		if !c.alive() {
			return fmt.Errorf("%s exited at start", c.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s does not listen on %s after 2m", c.name, c.addr)
}

func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// alive says whether its process runs (a zombie does not: no init may
// reap a killed daemon in a container).
func (c *component) alive() bool {
	c.mu.Lock()
	pid, exited := c.pid, c.exited
	c.mu.Unlock()
	if pid == 0 {
		return false
	}
	if exited != nil {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func (c *component) signal(sig syscall.Signal) error {
	c.mu.Lock()
	pid := c.pid
	c.mu.Unlock()
	if pid == 0 {
		return errors.New("not running")
	}
	if c.group {
		return syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig)
}

// kill sends SIGKILL and waits until the process is gone.
func (c *component) kill() error {
	c.mu.Lock()
	c.expect = true
	c.kills = append(c.kills, time.Now())
	c.mu.Unlock()
	if err := c.signal(syscall.SIGKILL); err != nil {
		return err
	}
	// A stopped process dies of SIGKILL too.
	return c.waitGone(15 * time.Second)
}

func (c *component) waitGone(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for c.alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still runs %v after the signal", c.name, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// stop ends it the ordinary way (SIGTERM, then SIGKILL after timeout).
func (c *component) stop(timeout time.Duration) {
	c.mu.Lock()
	c.expect = true
	c.mu.Unlock()
	if !c.alive() {
		return
	}
	_ = c.signal(syscall.SIGCONT)
	_ = c.signal(syscall.SIGTERM)
	if c.waitGone(timeout) != nil {
		_ = c.signal(syscall.SIGKILL)
		_ = c.waitGone(10 * time.Second)
	}
}

func (c *component) setFaulted(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on && !c.faulted {
		c.since = time.Now()
	}
	if !on && c.faulted {
		c.spans = append(c.spans, [2]time.Time{c.since, time.Now()})
	}
	c.faulted = on
}

// faultedDuring says whether a fault on it overlapped [from, to].
func (c *component) faultedDuring(from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.faulted && c.since.Before(to) {
		return true
	}
	for _, s := range c.spans {
		if s[0].Before(to) && s[1].After(from) {
			return true
		}
	}
	return false
}

// died notes an exit the supervisor found (its time is within a second).
func (c *component) died() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kills = append(c.kills, time.Now())
}

func (c *component) killTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.kills)
}

// faultSpans are its faults so far, the one on it now ending now.
func (c *component) faultSpans() [][2]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.spans)
	if c.faulted {
		out = append(out, [2]time.Time{c.since, time.Now()})
	}
	return out
}

func (c *component) isFaulted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.faulted
}

func (c *component) expected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expect
}

// supervisor restarts a component that ended without being asked to, as
// systemd's Restart=always would, and writes each such exit to the
// history: cfgd is not supposed to exit on a dependency's fault.
type supervisor struct {
	comps []*component
	hist  *history
	// restarting guards one restart per component at a time.
	mu         sync.Mutex
	restarting map[string]bool
	exits      map[string]int
}

func (s *supervisor) byName(name string) *component {
	for _, c := range s.comps {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (s *supervisor) watch(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range s.comps {
			if c.expected() || c.alive() {
				continue
			}
			s.mu.Lock()
			busy := s.restarting[c.name]
			s.restarting[c.name] = true
			if !busy {
				s.exits[c.name]++
				c.died()
			}
			s.mu.Unlock()
			if busy {
				continue
			}
			go func() {
				defer func() { s.mu.Lock(); delete(s.restarting, c.name); s.mu.Unlock() }()
				s.hist.write(map[string]any{"ev": "unexpected_exit", "target": c.name})
				start := time.Now()
				err := c.start(ctx)
				s.hist.write(map[string]any{"ev": "supervisor_restart", "target": c.name, "ms": time.Since(start).Milliseconds(), "err": errString(err)})
			}()
		}
	}
}

// dependencyFaulted says whether Postgres or the broker was down or
// paused during [from, to]: a bound that rests on the projections (an
// event through Kafka into a Postgres read model) does not hold then.
func (s *supervisor) dependencyFaulted(from, to time.Time) bool {
	for _, c := range s.comps {
		if (c.name == "postgres" || c.name == "broker") && c.faultedDuring(from, to) {
			return true
		}
	}
	return false
}

// servesBackAt is when the last fault of a serve replica that overlapped
// [from, to] ended (to while one still lasts), or from when none did. The
// projections run in the serve replicas, each a static member of its
// groups, so an event of a partition a stopped replica owns waits for it
// (or for its session timeout): a revocation's bound (docs/api.md#tokens,
// the poll plus the projection lag) starts again when it is back.
func (s *supervisor) servesBackAt(from, to time.Time) time.Time {
	back := from
	for _, c := range s.comps {
		if !strings.HasPrefix(c.name, "serve-") {
			continue
		}
		c.mu.Lock()
		if c.faulted && c.since.Before(to) {
			back = to
		}
		for _, sp := range c.spans {
			if sp[0].Before(to) && sp[1].After(from) && sp[1].After(back) {
				back = sp[1]
				if back.After(to) {
					back = to
				}
			}
		}
		c.mu.Unlock()
	}
	return back
}

// allUp says whether every component runs and none is faulted.
func (s *supervisor) allUp() bool {
	for _, c := range s.comps {
		if c.isFaulted() || !c.alive() {
			return false
		}
	}
	return true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
