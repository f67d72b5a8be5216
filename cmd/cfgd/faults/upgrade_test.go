//go:build upgrade

package faults

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// TestUpgrade is `make test-upgrade`: two `serve` replicas, a worker and
// the broker of an older build (CFGD_UPGRADE_FROM_BIN, built from
// UPGRADE_FROM) under load, then the new build's `cfgd migrate` while the
// old replicas keep serving (the old build's calls against the new schema:
// expand and contract), then every process replaced one by one with the
// new build, load running throughout, and one replica rolled back to the
// old build and forward again. Afterwards every acknowledged request-log
// event is stored once, every sign-in that got tokens has its one user,
// every task enqueued ended, the statistics equal raw SQL through each
// replica, and every Postgres read model equals what `cfgd replay`
// rebuilds.
func TestUpgrade(t *testing.T) {
	oldBin := os.Getenv("CFGD_UPGRADE_FROM_BIN")
	if oldBin == "" {
		t.Fatal("CFGD_UPGRADE_FROM_BIN names no binary: run make test-upgrade (UPGRADE_FROM=<git revision>)")
	}
	from := os.Getenv("CFGD_UPGRADE_FROM")
	newBin := cfgdBinary(t)
	start := time.Now()
	step := func(what string) { t.Logf("%-62s %6.1fs", what, time.Since(start).Seconds()) }

	brokerBin := oldBin
	broker, busEnv := startBrokerOf(t, func() string { return brokerBin })
	_, redisURL := startRedis(t)
	pool := testenv.EmptyPostgres(t)
	pgURL, chURL := pool.Config().ConnString(), localClickHouse(t)
	mail := startMailbox(t)
	shared := mail.Env()
	maps.Copy(shared, busEnv)
	shared["POSTGRES__URL"], shared["CLICKHOUSE__URL"], shared["REDIS__URL"] = pgURL, chURL, redisURL
	shared["AUTH__KEYS_DIR"] = filepath.Join(t.TempDir(), "keys")
	shared["TASKS__HEARTBEAT"] = "500ms"
	replicas := make([]*cfgd, 2)
	for i := range replicas {
		env := maps.Clone(shared)
		env["REPLICA__ID"] = fmt.Sprintf("replica-%d", i)
		replicas[i] = newCfgd(t, env)
		replicas[i].bin = oldBin
	}
	r0 := replicas[0]
	r0.run("migrate")
	key, keyID := r0.apiKey("upgrade@example.com")
	const pw = "upgrade stats password"
	r0.run("user", "create-superuser", "--email", "stats@example.com", "--password", pw)
	staff := "Basic " + base64.StdEncoding.EncodeToString([]byte("stats@example.com:"+pw))
	for _, r := range replicas {
		r.start()
		r.waitReady(60 * time.Second)
	}
	worker := r0.worker("old")
	step("old build " + from + ": broker, 2 replicas and a worker ready")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load, waits := ingestEach(ctx, replicas, key, keyID)
	signers := []*signer{newSigner(replicas[0], mail), newSigner(replicas[1], mail)}
	for i, s := range signers {
		waits = append(waits, s.run(ctx, fmt.Sprintf("s%d", i), 1, 100*time.Millisecond))
	}
	signed := func() int { return signers[0].count() + signers[1].count() }
	var tasks []string
	enqueue := func(c *cfgd) {
		out := c.run("task", "enqueue", "--queue", "default", "--type", "demo:echo", "--payload", fmt.Sprintf(`{"n": %d}`, len(tasks)))
		tasks = append(tasks, strings.TrimSpace(out[strings.LastIndex(out, ":")+1:]))
	}
	// progress waits until the load moved on by some of each kind, so
	// every phase is proven under traffic.
	progress := func(what string) {
		t.Helper()
		enqueue(r0)
		load.waitAcked(t, load.acked()+20)
		n := signed()
		eventually(t, what+": sign-ins go on", 60*time.Second, func() error {
			if signed() < n+4 {
				return fmt.Errorf("%d sign-ins", signed()-n)
			}
			return nil
		})
		step(what)
	}
	progress("old build under load")

	// The new build's migrate while the old replicas serve: they keep
	// working against the migrated schema.
	r0.bin = newBin
	r0.run("migrate")
	r0.bin = oldBin
	progress("new migrate applied, the old build keeps serving")

	// Replicas one by one, then the worker, then the broker.
	for i, r := range replicas {
		r.logs.mark("upgrade")
		r.srv.signal(t, syscall.SIGTERM, 30*time.Second)
		r.bin = newBin
		r.start()
		r.waitReady(60 * time.Second)
		progress(fmt.Sprintf("replica %d runs the new build", i))
	}
	worker.signal(t, syscall.SIGTERM, 30*time.Second)
	worker = r0.worker("new")
	progress("the worker runs the new build")
	broker.stop()
	brokerBin = newBin
	broker.start()
	for _, r := range replicas {
		r.waitReady(60 * time.Second)
	}
	progress("the broker runs the new build")

	// A rollback of one replica to the old build after the new migrate
	// (docs/upgrading.md says it is supported for one release), then
	// forward again.
	r1 := replicas[1]
	for _, bin := range []string{oldBin, newBin} {
		r1.srv.signal(t, syscall.SIGTERM, 30*time.Second)
		r1.bin = bin
		r1.start()
		r1.waitReady(60 * time.Second)
		which := "new"
		if bin == oldBin {
			which = "old"
		}
		progress("replica 1 back on the " + which + " build")
	}
	cancel()
	for _, w := range waits {
		w()
	}

	// Every acknowledged operation present once.
	all := merged(r0, load)
	ch, pg := openClickHouse(t, chURL), openPostgres(t, pgURL)
	// Every stop was graceful: usage counts every acknowledged post.
	rows := all.checkIngested(t, ch, pg, 60*time.Second, all.calls)
	for _, s := range signers {
		s.checkUsers(t, pg, 45*time.Second)
	}
	eventually(t, "every task enqueued ends", 60*time.Second, func() error {
		var done int
		err := pg.QueryRow(context.Background(), `SELECT count(*) FROM task_runs WHERE task_id = ANY($1) AND state = 'succeeded'`, tasks).Scan(&done)
		if err == nil && done != len(tasks) {
			err = fmt.Errorf("%d of %d tasks succeeded", done, len(tasks))
		}
		return err
	})
	step(fmt.Sprintf("%d events held once, %d sign-ins, %d tasks", rows, signed(), len(tasks)))

	// The statistics equal raw SQL through each replica.
	var raw uint64
	if err := ch.QueryRow(context.Background(), "SELECT count() FROM requestlog_raw").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d's overview equals raw SQL", i), 30*time.Second, func() error {
			n, err := r.overview(context.Background(), staff)
			if err == nil && n != int64(raw) {
				err = fmt.Errorf("overview %d, raw SQL %d", n, raw)
			}
			return err
		})
	}

	// Every Postgres read model equals a replay. The worker stops first:
	// its heartbeats move the task read model.
	worker.signal(t, syscall.SIGTERM, 30*time.Second)
	time.Sleep(2 * time.Second)
	names, queries := postgresReadModels(t, r0)
	before := testenv.Dump(t, pg, queries...)
	r0.run(append([]string{"replay"}, names...)...)
	if after := testenv.Dump(t, pg, queries...); after != before {
		t.Errorf("read models differ from their replay (%v):\n--- live\n%s\n--- replayed\n%s", names, before, after)
	}
	step(fmt.Sprintf("read models %v equal their replay", names))
	_ = broker
}

// readModelLine is a `cfgd replay --list` line of a Postgres read model:
// its name, then, before STREAMS, POSITION and LAG, its tables.
var readModelLine = regexp.MustCompile(`^(\S+)\s+read model\s.*\s(\S+)\s+\d+\s+\d+\s+\d+\s*$`)

// postgresReadModels are the Postgres read models `cfgd replay --list`
// names and a query per table that dumps it in a stable order.
func postgresReadModels(t testing.TB, c *cfgd) (names, queries []string) {
	t.Helper()
	for _, line := range strings.Split(c.run("replay", "--list"), "\n") {
		m := readModelLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names = append(names, m[1])
		for _, table := range strings.Split(m[2], ",") {
			queries = append(queries, fmt.Sprintf("SELECT * FROM %s t ORDER BY t::text", table))
		}
	}
	if len(names) < 3 {
		t.Fatalf("cfgd replay --list names %d Postgres read models: %v", len(names), names)
	}
	return names, queries
}
