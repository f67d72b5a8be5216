// Command chaos is `make chaos`: cfgd deployed as docs/scaling.md deploys
// it (`cfgd broker`, two `cfgd serve` replicas, one `cfgd worker`, a
// ClickHouse cluster of 2 shards x 2 replicas with ZooKeeper, its own
// Postgres and Redis), all on this machine with its own ports and data
// under ./data/chaos/<seed>, driven by a steady mixed load through both
// replicas while a nemesis drawn from the seed kills (-9) and pauses
// (SIGSTOP/SIGCONT) its processes. After the schedule everything heals and
// a checker compares the stores with the ledger of what was acknowledged.
// The schedule and every operation's answer go to
// ./data/chaos/<seed>/history.jsonl; a violation exits 1 with the seed.
//
//	CHAOS_SEED=42 CHAOS_DURATION=3m make chaos
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/internal/otpmail"
)

func main() {
	os.Exit(run())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() int {
	var (
		seedS    = flag.String("seed", os.Getenv("CHAOS_SEED"), "the seed of the fault schedule (CHAOS_SEED; default random)")
		durS     = flag.String("duration", envOr("CHAOS_DURATION", "10m"), "how long the nemesis runs (CHAOS_DURATION)")
		bin      = flag.String("cfgd", "", "the cfgd binary (default: go build ./cmd/cfgd into the run's directory)")
		base     = flag.Int("port-base", 17000, "first port of the run's own range (CHAOS_PORT_BASE): Postgres +0, Redis +1, broker +2, serve +10/+11, gRPC +20/+21, ZooKeeper +30, ClickHouse +101..+104 (HTTP -799.., interserver +201..)")
		dataRoot = flag.String("data", envOr("CHAOS_DATA_DIR", "data/chaos"), "where each seed's directory goes")
		keep     = flag.Bool("keep", false, "leave every process running at the end (to look around); stop them with cluster.sh down and the pids in the history")
	)
	flag.Parse()
	if v := os.Getenv("CHAOS_PORT_BASE"); v != "" {
		*base, _ = strconv.Atoi(v)
	}
	var seed uint64
	if *seedS == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
	} else {
		var err error
		if seed, err = strconv.ParseUint(*seedS, 10, 64); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: CHAOS_SEED %q: %v\n", *seedS, err)
			return 2
		}
	}
	length, err := time.ParseDuration(*durS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: CHAOS_DURATION %q: %v\n", *durS, err)
		return 2
	}
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("chaos %6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	say("seed %d, duration %v (replay: CHAOS_SEED=%d CHAOS_DURATION=%v make chaos)", seed, length, seed, length)
	rc := chaos(seed, length, *bin, *base, *dataRoot, *keep, start, say)
	if rc != 0 {
		say("FAILED: seed %d (CHAOS_SEED=%d CHAOS_DURATION=%v make chaos)", seed, seed, length)
	}
	return rc
}

func chaos(seed uint64, length time.Duration, bin string, base int, dataRoot string, keep bool, start time.Time, say func(string, ...any)) int {
	root, err := repoRoot()
	if err != nil {
		say("%v", err)
		return 2
	}
	dir, err := filepath.Abs(filepath.Join(dataRoot, strconv.FormatUint(seed, 10)))
	if err != nil {
		say("%v", err)
		return 2
	}
	r := &deployment{dir: dir, base: base, script: filepath.Join(root, "deploy", "scripts", "cluster", "cluster.sh")}
	// A run of the same seed before: its processes stopped (by pid), its
	// data gone.
	if _, err := os.Stat(dir); err == nil {
		_ = os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
		_ = r.clusterScript(context.Background(), "down")
		if err := os.RemoveAll(dir); err != nil {
			say("remove %s: %v", dir, err)
			return 2
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		say("%v", err)
		return 2
	}
	for _, p := range []int{0, 1, 2, 10, 11, 20, 21, 30, 101, 102, 103, 104, 201, 202, 203, 204, -799, -798, -797, -796} {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", base+p), 200*time.Millisecond); err == nil {
			c.Close()
			say("port %d is taken: another chaos run? (set CHAOS_PORT_BASE)", base+p)
			return 2
		}
	}
	if bin == "" {
		bin = filepath.Join(dir, "cfgd")
		out, err := exec.Command("go", "build", "-o", bin, "./cmd/cfgd").CombinedOutput()
		if err != nil {
			say("go build: %v\n%s", err, out)
			return 2
		}
	}
	r.bin = bin
	hist, err := openHistory(filepath.Join(dir, "history.jsonl"), start)
	if err != nil {
		say("%v", err)
		return 2
	}
	defer hist.close()
	r.hist = hist
	hist.write(map[string]any{"ev": "run", "seed": seed, "duration_s": length.Seconds(), "port_base": base, "dir": dir})
	if r.mail, err = otpmail.Start(); err != nil {
		say("%v", err)
		return 2
	}
	defer r.mail.Close()

	// Ctrl-C stops the run and what it started.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	passed := false
	defer func() {
		if keep {
			say("left running (-keep): data in %s", dir)
			return
		}
		r.down()
		if passed {
			// A pass keeps its history and logs; the stores' data (a few
			// hundred MB to GBs, mostly ClickHouse parts) goes.
			say("stopped everything; removing the stores' data (a minute or two for the ClickHouse parts)")
			for _, d := range []string{"cluster", "postgres", "kafka", "redis", "media", "cfgd"} {
				_ = os.RemoveAll(filepath.Join(dir, d))
			}
			say("history and logs in %s", dir)
			return
		}
		say("stopped everything; data, history and logs in %s", dir)
	}()
	if err := r.up(ctx, say); err != nil {
		say("start: %v (logs in %s/logs)", err, dir)
		return 2
	}
	for _, c := range r.sup.comps {
		hist.write(map[string]any{"ev": "process", "name": c.name, "tier": c.tier, "pid": c.pid, "addr": c.addr})
	}
	say("%d processes up: %s", len(r.sup.comps), names(r.sup.comps))
	supCtx, supStop := context.WithCancel(ctx)
	defer supStop()
	go r.sup.watch(supCtx)

	cl := &client{urls: r.serveURL, http: &http.Client{Timeout: 15 * time.Second}, internal: map[string]int{}}
	ck := &checker{r: r, l: newLedger(), c: cl, rp: &report{}}
	if _, err := eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		for i := range r.serveURL {
			if err := ck.readyz(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		say("the replicas are not ready: %v", err)
		return 2
	}
	ld := &loader{c: cl, r: r, l: ck.l, hist: hist, mail: r.mail, seed: seed}
	// The key was made before the replicas started; /readyz waits until
	// their API-key projection has it (docs/api.md#tokens), so a refusal
	// after ready is noted.
	keyWait := time.Now()
	if _, err := eventually(ctx, time.Minute, func(ctx context.Context) error {
		for i := range r.serveURL {
			code, err := ld.ingestOnce(ctx, r.key, r.keyID, fmt.Sprintf("c%d-warmup-%d-%d", seed, i, time.Now().UnixNano()), i)
			if err != nil || code != http.StatusAccepted {
				return fmt.Errorf("serve-%d answers the new API key %s", i, outcome(code, err))
			}
		}
		return nil
	}); err != nil {
		say("%v", err)
		return 2
	}
	if d := time.Since(keyWait); d > time.Second {
		ck.rp.note("the API key made before the replicas started was refused (401) for %v after both answered ready", d.Round(time.Millisecond))
	}
	hist.write(map[string]any{"ev": "key_usable", "ms": time.Since(keyWait).Milliseconds()})
	faults := plan(seed, length, r.sup.comps)
	for _, f := range faults {
		hist.write(map[string]any{"ev": "schedule", "n": f.N, "at_s": f.At.Seconds(), "target": f.Target, "kind": f.Kind, "for_s": f.For.Seconds()})
	}
	say("both replicas ready; schedule: %d faults over %v; load starts", len(faults), length)

	stop, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	hard, endRetries := context.WithCancel(ctx)
	defer endRetries()
	waits := []func(){ld.ingestLoad(stop, hard), ld.signIns(stop, hard), ld.keyChurn(stop, hard), ld.tasks(stop, hard)}
	grpcWait, err := ld.grpcLoad(stop, hard)
	if err != nil {
		say("gRPC: %v", err)
		return 2
	}
	waits = append(waits, grpcWait, ld.otlpLoad(stop, hard), ld.queueOps(stop, hard), ld.workerRestarts(stop, hard))
	time.Sleep(5 * time.Second)

	nem := &nemesis{sup: r.sup, hist: hist, done: map[string]int{}}
	nemStart := time.Now()
	replaysWait, replays := ld.midReplays(ctx, nemStart, length)
	waits = append(waits, replaysWait)
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	nemDone := make(chan struct{})
	go func() { nem.run(ctx, nemStart, faults); close(nemDone) }()
wait:
	for {
		select {
		case <-nemDone:
			break wait
		case <-ctx.Done():
			return 2
		case <-progress.C:
			ck.l.mu.Lock()
			say("%v in: %d events acknowledged, %d sign-ins, %d tasks", time.Since(nemStart).Round(time.Second), len(ck.l.acked), len(ck.l.signed), len(ck.l.tasks))
			ck.l.mu.Unlock()
		}
	}
	say("schedule done; healing")
	// Heal: every process up, both replicas ready; the load goes on until
	// then, then stops, and unacknowledged batches get 60 s more of retries.
	ck.healStart = time.Now()
	healTook, err := eventually(ctx, 3*time.Minute, func(ctx context.Context) error {
		if !r.sup.allUp() {
			var down []string
			for _, c := range r.sup.comps {
				if !c.alive() || c.isFaulted() {
					down = append(down, c.name)
				}
			}
			return fmt.Errorf("down: %v", down)
		}
		for i := range r.serveURL {
			if err := ck.readyz(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		ck.rp.violate("not healed within 3m of the schedule's end: %v", err)
	}
	stopLoad()
	go func() { time.Sleep(60 * time.Second); endRetries() }()
	for _, w := range waits {
		w()
	}
	endRetries()
	say("healed in %v; load stopped; checking", healTook.Round(time.Millisecond))
	hist.write(map[string]any{"ev": "healed", "ms": healTook.Milliseconds()})

	pool, err := pgxpool.New(ctx, r.pgURL)
	if err != nil {
		say("%v", err)
		return 2
	}
	defer pool.Close()
	ck.pg = pool
	ck.replays(replays)
	ck.requestLogs(ctx)
	ck.usage(ctx)
	ck.users(ctx)
	ck.keys(ctx)
	ck.sessions()
	ck.queue(ctx)
	ck.worker(ctx)
	ck.tasks(ctx)
	ck.deadLetters(ctx)
	ck.eventLog(ctx)
	ck.readModels(ctx)
	cl.mu.Lock()
	for route, n := range cl.internal {
		ck.rp.note("%s answered 500 %d times (the history has when; a dependency's fault should be a 503)", route, n)
	}
	cl.mu.Unlock()
	r.sup.mu.Lock()
	for name, n := range r.sup.exits {
		ck.rp.note("%s exited %d times by itself (restarted by the supervisor)", name, n)
	}
	r.sup.mu.Unlock()
	printTable(seed, length, nem, ck)
	for _, v := range ck.rp.violations {
		hist.write(map[string]any{"ev": "violation", "what": v})
	}
	if len(ck.rp.violations) > 0 {
		return 1
	}
	passed = true
	return 0
}

func names(cs []*component) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.name)
	}
	return strings.Join(s, " ")
}

// repoRoot is the module's directory: make runs the tool from there.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "scripts", "cluster", "cluster.sh")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("not inside the cfgd repository (no deploy/scripts/cluster/cluster.sh above %s)", wd)
		}
	}
}

func printTable(seed uint64, length time.Duration, nem *nemesis, ck *checker) {
	rp := ck.rp
	fmt.Println()
	fmt.Printf("chaos seed %d, %v, %d CPUs\n", seed, length, runtime.NumCPU())
	fmt.Println("faults injected")
	nem.mu.Lock()
	keys := make([]string, 0, len(nem.done))
	total := 0
	for k, n := range nem.done {
		keys = append(keys, k)
		total += n
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("  %-34s %6d\n", k, nem.done[k])
	}
	fmt.Printf("  %-34s %6d\n", "total", total)
	fmt.Printf("  %-34s %6d\n", "skipped (a peer still down)", nem.skipped)
	nem.mu.Unlock()
	fmt.Println("operations")
	ck.l.mu.Lock()
	keys = keys[:0]
	for k := range ck.l.ops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("  %-34s %6d\n", k, ck.l.ops[k])
	}
	ck.l.mu.Unlock()
	fmt.Println("request log")
	for _, row := range []struct {
		k string
		v int
	}{{"events sent", rp.sent}, {"acknowledged", rp.acked}, {"rows stored", rp.held},
		{"lost (acknowledged, not stored)", rp.lost}, {"doubled", rp.doubled}, {"stored, never sent", rp.unknown},
		{"stored once, unacknowledged", rp.unackedHeld}} {
		fmt.Printf("  %-34s %6d\n", row.k, row.v)
	}
	fmt.Printf("time to heal (schedule end to every process up and ClickHouse settled) %v\n", rp.healTook.Round(time.Millisecond))
	for _, n := range rp.notes {
		fmt.Println("  " + n)
	}
	if len(rp.violations) == 0 {
		fmt.Println("PASS: no violation")
		return
	}
	fmt.Printf("FAIL: %d violations\n", len(rp.violations))
	for _, v := range rp.violations {
		fmt.Println("  - " + v)
	}
}
