package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/internal/rig"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// report is what the checker found.
type report struct {
	violations []string
	notes      []string
	// request log
	sent, acked, held, lost, doubled, unknown, unackedHeld int
	healTook                                               time.Duration
}

func (rp *report) violate(format string, args ...any) {
	rp.violations = append(rp.violations, fmt.Sprintf(format, args...))
}

func (rp *report) note(format string, args ...any) {
	rp.notes = append(rp.notes, fmt.Sprintf(format, args...))
}

// eventually polls cond every second until it returns nil or timeout
// passes; it returns the last error and how long it took.
func eventually(ctx context.Context, timeout time.Duration, cond func(context.Context) error) (time.Duration, error) {
	start := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := cond(cctx)
		cancel()
		if err == nil || time.Since(start) > timeout || ctx.Err() != nil {
			return time.Since(start), err
		}
		time.Sleep(time.Second)
	}
}

func (r *deployment) node(name string) (driver.Conn, error) {
	return clickhouse.Open(&clickhouse.Options{Addr: []string{r.chAddrs[name]}, Auth: clickhouse.Auth{Database: "cfgd"},
		DialTimeout: 2 * time.Second})
}

// checker reads the ledger and the stores.
type checker struct {
	// healStart is the end of the schedule: the time to heal runs from it
	// until every process is up and ClickHouse holds what was acknowledged.
	healStart time.Time
	r         *deployment
	l         *ledger
	c         *client
	pg        *pgxpool.Pool
	rp        *report
}

// requestLogs: both replicas of each shard agree and the shards hold every
// acknowledged event once; nothing is stored that no client sent.
func (ck *checker) requestLogs(ctx context.Context) {
	local := requestlogview.RawTable + requestlogview.LocalSuffix
	nodes := map[string]driver.Conn{}
	for name := range ck.r.chAddrs {
		conn, err := ck.r.node(name)
		if err != nil {
			ck.rp.violate("ClickHouse %s: %v", name, err)
			return
		}
		defer conn.Close()
		nodes[name] = conn
	}
	l := ck.l
	l.mu.Lock()
	sent, acked := l.sent, l.acked
	l.mu.Unlock()
	ck.rp.sent, ck.rp.acked = len(sent), len(acked)
	var held map[string]int
	prev := -1
	took, err := eventually(ctx, 3*time.Minute, func(ctx context.Context) error {
		counts := map[string]uint64{}
		for name, conn := range nodes {
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM "+local).Scan(&n); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			counts[name] = n
		}
		if counts["s1r1"] != counts["s1r2"] || counts["s2r1"] != counts["s2r2"] {
			return fmt.Errorf("replicas of a shard differ: %v", counts)
		}
		held = map[string]int{}
		for _, name := range []string{"s1r1", "s2r1"} {
			rows, err := nodes[name].Query(ctx, "SELECT request_id FROM "+local)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				held[id]++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		total := int(counts["s1r1"] + counts["s2r1"])
		missing := 0
		for id := range acked {
			if held[id] == 0 {
				missing++
			}
		}
		stable := total == prev
		prev = total
		switch {
		case missing > 0:
			return fmt.Errorf("%d of %d acknowledged events not stored (%d rows)", missing, len(acked), total)
		case !stable:
			return fmt.Errorf("still growing: %d rows", total)
		}
		return nil
	})
	ck.rp.healTook = time.Since(ck.healStart)
	if err != nil {
		ck.rp.note("ClickHouse did not settle within %v: %v", took.Round(time.Second), err)
	}
	l.mu.Lock()
	atLeastOnce := l.atLeastOnce
	l.mu.Unlock()
	rows, retriedTwice := 0, 0
	for id, n := range held {
		rows += n
		switch {
		case n > 1 && atLeastOnce[id]:
			retriedTwice++
		case n > 1:
			ck.rp.doubled++
		}
		if !sent[id] {
			ck.rp.unknown++
		} else if !acked[id] {
			ck.rp.unackedHeld++
		}
	}
	for id := range acked {
		if held[id] == 0 {
			ck.rp.lost++
		}
	}
	ck.rp.held = rows
	if ck.rp.lost > 0 {
		ck.rp.violate("%d acknowledged request-log events are not stored", ck.rp.lost)
	}
	if ck.rp.doubled > 0 {
		ck.rp.violate("%d request-log events are stored more than once", ck.rp.doubled)
	}
	if ck.rp.unknown > 0 {
		ck.rp.violate("%d stored request-log events were never sent", ck.rp.unknown)
	}
	ck.rp.note("request log: %d events sent, %d acknowledged, %d rows stored (%d of them unacknowledged, stored once), settled in %v",
		len(sent), len(acked), rows, ck.rp.unackedHeld, took.Round(time.Millisecond))
	ck.rp.note("OTLP: %d spans of retried exports (at least once: OTLP has no idempotency key), %d of them stored twice or more",
		len(atLeastOnce), retriedTwice)

	// The statistics through each replica equal raw SQL.
	for i := range ck.r.serveURL {
		took, err := eventually(ctx, time.Minute, func(ctx context.Context) error {
			var o requestlogview.Overview
			code, err := ck.c.do(ctx, i, http.MethodGet, "/api/grpc/monitor/overview/?hours=24", nil,
				map[string]string{"Authorization": ck.r.staff}, &o)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("overview answered %d", code)
			}
			if o.TotalRequests != int64(rows) {
				return fmt.Errorf("overview counts %d, raw SQL %d", o.TotalRequests, rows)
			}
			return nil
		})
		if err != nil {
			ck.rp.violate("serve-%d: overview statistics differ from raw SQL: %v", i, err)
		} else {
			ck.rp.note("serve-%d: overview equals raw SQL (%d) after %v", i, rows, took.Round(time.Millisecond))
		}
	}

	l.mu.Lock()
	bad := append([]string(nil), l.badIngest...)
	l.mu.Unlock()
	if len(bad) > 0 {
		ck.rp.violate("%d valid ingest batches were refused: %s", len(bad), strings.Join(first(bad, 5), "; "))
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// users: every sign-in that got tokens has one user, the one it was told;
// the read model equals the event store; no code was accepted twice.
func (ck *checker) users(ctx context.Context) {
	l := ck.l
	l.mu.Lock()
	signed := map[string]int64{}
	for k, v := range l.signed {
		signed[k] = v
	}
	reused, freshBad, tries := append([]string(nil), l.reused...), append([]string(nil), l.freshBad...), l.reuseTrys
	l.mu.Unlock()
	var users map[string]int64
	_, err := eventually(ctx, time.Minute, func(ctx context.Context) error {
		var err error
		users, err = rig.Users(ctx, ck.pg)
		return err
	})
	if err != nil {
		ck.rp.violate("users: %v", err)
	}
	wrong := 0
	for email, id := range signed {
		if users[email] != id {
			wrong++
			if wrong <= 5 {
				ck.rp.violate("%s signed in as user %d, its row is user %d", email, id, users[email])
			}
		}
	}
	if len(reused) > 0 {
		ck.rp.violate("%d used OTP codes were accepted again: %s", len(reused), strings.Join(first(reused, 5), "; "))
	}
	if len(freshBad) > 0 {
		ck.rp.violate("%d fresh OTP codes were refused by the replica they were used on: %s", len(freshBad), strings.Join(first(freshBad, 5), "; "))
	}
	ck.rp.note("sign-ins: %d got tokens, %d users in all, %d second uses refused, %d with a wrong user", len(signed), len(users), tries, wrong)
}

// keys: every revoked key is refused by both replicas now.
func (ck *checker) keys(ctx context.Context) {
	l := ck.l
	l.mu.Lock()
	revoked := map[int64]string{}
	for k, v := range l.revoked {
		revoked[k] = v
	}
	lags := append([]time.Duration(nil), l.revokeLags...)
	l.mu.Unlock()
	for id, key := range revoked {
		for r := range ck.r.serveURL {
			code, err := ck.c.do(ctx, r, http.MethodPost, "/api/grpc/monitor/ingest/", []rig.LogEvent{}, map[string]string{"X-API-Key": key}, nil)
			if err == nil && code != http.StatusUnauthorized {
				ck.rp.violate("revoked API key %d is answered %d by serve-%d", id, code, r)
			}
		}
	}
	// docs/api.md: refused by every serve within about a second.
	worst, over := worstOver(lags, 2*time.Second)
	if over > 0 {
		ck.rp.violate("%d revoked API keys were accepted more than 2 s after the revoke was answered (worst %v)", over, worst.Round(time.Millisecond))
	}
	ck.l.mu.Lock()
	excused := ck.l.excusedLags
	ck.l.mu.Unlock()
	ck.rp.note("API keys: %d revoked, %d judged; the last call accepted with a revoked key came %v after the revoke's answer (0: none); "+
		"%d revocations (keys and sessions) not judged: Postgres or the broker was down or paused meanwhile",
		len(revoked), len(lags), worst.Round(time.Millisecond), excused)
}

// worstOver is the longest of the judged revocation lags and how many
// are over bound.
func worstOver(lags []time.Duration, bound time.Duration) (worst time.Duration, over int) {
	for _, d := range lags {
		worst = max(worst, d)
		if d > bound {
			over++
		}
	}
	return worst, over
}

// sessions: a logged-out refresh token is refused at once, its access
// token within JWT__REVOCATION_POLL (1 s) plus the projection lag.
func (ck *checker) sessions() {
	ck.l.mu.Lock()
	bad := append([]string(nil), ck.l.refreshAfterLogout...)
	lags := append([]time.Duration(nil), ck.l.sessionLags...)
	ck.l.mu.Unlock()
	if len(bad) > 0 {
		ck.rp.violate("%d refresh tokens were accepted after their logout was answered: %s", len(bad), strings.Join(first(bad, 5), "; "))
	}
	worst, over := worstOver(lags, 3*time.Second)
	if over > 0 {
		ck.rp.violate("%d access tokens were accepted more than 3 s after their logout was answered (worst %v)", over, worst.Round(time.Millisecond))
	}
	ck.rp.note("sessions: %d logged out and judged; the last access accepted after a logout came %v after it (0: none)", len(lags), worst.Round(time.Millisecond))
}

// queue: the default queue runs after its last resume was answered.
func (ck *checker) queue(ctx context.Context) {
	ck.l.mu.Lock()
	pauses, resumes := ck.l.ops["queue: pause"], ck.l.ops["queue: resume"]
	ck.l.mu.Unlock()
	if pauses > resumes {
		// The run ended between a pause and its resume: resume it, as the
		// operator would, before the tasks are judged.
		code, err := ck.c.do(ctx, 0, http.MethodPost, "/api/tasks/queue-manage/", map[string]string{"action": "resume", "queue_name": "default"},
			map[string]string{"Authorization": ck.r.staff}, nil)
		ck.rp.note("queue: resumed after the run: %s", outcome(code, err))
	}
	var paused bool
	_, err := eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		var res struct {
			Queues []struct {
				Name     string `json:"name"`
				IsPaused bool   `json:"is_paused"`
			} `json:"queues"`
		}
		code, err := ck.c.do(ctx, 0, http.MethodGet, "/api/tasks/queue-status/", nil, map[string]string{"Authorization": ck.r.staff}, &res)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("queue-status: %s", outcome(code, err))
		}
		for _, q := range res.Queues {
			if q.Name == "default" {
				paused = q.IsPaused
			}
		}
		if paused {
			return errors.New("the default queue is paused")
		}
		return nil
	})
	if err != nil {
		ck.rp.violate("queue: %v after %d pauses and %d resumes answered", err, pauses, resumes)
	}
	ck.rp.note("queue: %d pauses and %d resumes answered; paused at the end: %v", pauses, resumes, paused)
}

// tasks: every acknowledged task reached a final state or is still queued.
func (ck *checker) tasks(ctx context.Context) {
	ck.l.mu.Lock()
	ids := append([]string(nil), ck.l.tasks...)
	ck.l.mu.Unlock()
	states := map[string]string{}
	took, err := eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		rows, err := ck.pg.Query(ctx, `SELECT task_id, state FROM task_runs WHERE task_id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		clear(states)
		for rows.Next() {
			var id, s string
			if err := rows.Scan(&id, &s); err != nil {
				return err
			}
			states[id] = s
		}
		if err := rows.Err(); err != nil {
			return err
		}
		open := 0
		for _, id := range ids {
			if s := states[id]; s != "succeeded" && s != "failed" && s != "archived" && s != "deleted" {
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d of %d acknowledged tasks not final", open, len(ids))
		}
		return nil
	})
	by := map[string]int{}
	for _, id := range ids {
		s := states[id]
		if s == "" {
			s = "(no row)"
		}
		by[s]++
	}
	if err != nil {
		ck.rp.violate("tasks: %v: %v", err, by)
	}
	ck.rp.note("tasks: %d acknowledged, states %v (settled in %v)", len(ids), by, took.Round(time.Millisecond))

	// The task statistics through each replica equal the lifecycle the
	// read model recorded, and count no task no client enqueued.
	var total, succeeded int
	if err := ck.pg.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM task_runs`).Scan(&total, &succeeded); err != nil {
		ck.rp.violate("task_runs: %v", err)
		return
	}
	ck.l.mu.Lock()
	fails := ck.l.taskFails
	ck.l.mu.Unlock()
	if total < len(ids) || total > len(ids)+fails {
		ck.rp.violate("tasks: %d runs recorded, %d enqueues acknowledged and %d failed (a failed enqueue may have happened)", total, len(ids), fails)
	}
	for i := range ck.r.serveURL {
		var st struct {
			Total     int `json:"total_tasks"`
			Completed int `json:"completed_tasks"`
		}
		code, err := ck.c.do(ctx, i, http.MethodGet, "/api/tasks/task-statistics/", nil, map[string]string{"Authorization": ck.r.staff}, &st)
		switch {
		case err != nil || code != http.StatusOK:
			ck.rp.violate("serve-%d task-statistics: %s", i, outcome(code, err))
		case st.Total != total || st.Completed != succeeded:
			ck.rp.violate("serve-%d task statistics %d total, %d completed; the lifecycle recorded %d and %d", i, st.Total, st.Completed, total, succeeded)
		}
	}
}

// deadLetters: none, or each one named.
func (ck *checker) deadLetters(ctx context.Context) {
	out, err := ck.r.cli(ctx, 2*time.Minute, "deadletters", "list")
	if err != nil {
		ck.rp.violate("cfgd deadletters list: %v", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if strings.TrimSpace(out) == "" {
		lines = nil
	}
	if len(lines) > 0 {
		ck.rp.violate("%d dead letters, none explained: %s", len(lines), strings.Join(first(lines, 5), " | "))
	} else {
		ck.rp.note("dead letters: none")
	}
}

// readyz says whether replica i answers ready.
func (ck *checker) readyz(ctx context.Context, i int) error {
	var body struct {
		Status string          `json:"status"`
		Checks json.RawMessage `json:"checks"`
	}
	code, err := ck.c.do(ctx, i, http.MethodGet, "/readyz", nil, nil, &body)
	if err != nil {
		return err
	}
	if code != http.StatusOK || body.Status != "ready" {
		return fmt.Errorf("serve-%d /readyz %d %s", i, code, body.Checks)
	}
	return nil
}

// readModelLine is a `cfgd replay --list` line of a Postgres read model:
// its name, then, before STREAMS, POSITION and LAG, its tables.
var readModelLine = regexp.MustCompile(`^(\S+)\s+read model\s.*\s(\S+)\s+\d+\s+\d+\s+\d+\s*$`)

// readModels: every Postgres read model equals what `cfgd replay`
// rebuilds, row for row. The worker stops first: its heartbeats move the
// task read model.
func (ck *checker) readModels(ctx context.Context) {
	if w := ck.r.sup.byName("worker"); w != nil {
		w.stop(30 * time.Second)
	}
	time.Sleep(2 * time.Second)
	out, err := ck.r.cli(ctx, time.Minute, "replay", "--list")
	if err != nil {
		ck.rp.violate("cfgd replay --list: %v", err)
		return
	}
	var names, tables []string
	for _, line := range strings.Split(out, "\n") {
		if m := readModelLine.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
			tables = append(tables, strings.Split(m[2], ",")...)
		}
	}
	if len(names) == 0 {
		ck.rp.violate("cfgd replay --list names no Postgres read model:\n%s", out)
		return
	}
	dump := func() (map[string][]string, error) {
		d := map[string][]string{}
		for _, t := range tables {
			rows, err := ck.pg.Query(ctx, fmt.Sprintf("SELECT t::text FROM %s t ORDER BY 1", t))
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					rows.Close()
					return nil, err
				}
				d[t] = append(d[t], s)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	before, err := dump()
	if err != nil {
		ck.rp.violate("read models: %v", err)
		return
	}
	t := time.Now()
	if _, err := ck.r.cli(ctx, 5*time.Minute, append([]string{"replay"}, names...)...); err != nil {
		ck.rp.violate("cfgd replay %v: %v", names, err)
		return
	}
	after, err := dump()
	if err != nil {
		ck.rp.violate("read models after the replay: %v", err)
		return
	}
	rows := 0
	for _, tb := range tables {
		rows += len(before[tb])
		if !slices.Equal(before[tb], after[tb]) {
			ck.rp.violate("read model table %s differs from its replay: %d rows live, %d replayed; first difference: %s",
				tb, len(before[tb]), len(after[tb]), firstDiff(before[tb], after[tb]))
		}
	}
	ck.rp.note("read models %v (%d tables, %d rows) equal their replay (%v)", names, len(tables), rows, time.Since(t).Round(time.Millisecond))
}

func firstDiff(a, b []string) string {
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("live %q, replayed %q", x, y)
		}
	}
	return ""
}

// worker: after the restarts and faults the worker is registered and
// running (not left stopped by a restart cut in the middle).
func (ck *checker) worker(ctx context.Context) {
	var state string
	_, err := eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		var res struct {
			Workers []struct {
				ID    string `json:"worker_id"`
				State string `json:"state"`
			} `json:"workers"`
		}
		code, err := ck.c.do(ctx, 0, http.MethodGet, "/api/tasks/workers/", nil, map[string]string{"Authorization": ck.r.staff}, &res)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("workers: %s", outcome(code, err))
		}
		state = ""
		for _, w := range res.Workers {
			if w.ID == workerID {
				state = w.State
			}
		}
		if state != "running" {
			return fmt.Errorf("worker %s is %q", workerID, state)
		}
		return nil
	})
	ck.l.mu.Lock()
	var restarts []string
	for k, n := range ck.l.ops {
		if strings.HasPrefix(k, "worker restart: ") {
			restarts = append(restarts, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "worker restart: "), n))
		}
	}
	ck.l.mu.Unlock()
	slices.Sort(restarts)
	if err != nil {
		ck.rp.violate("worker after the run: %v (restart commands: %s)", err, strings.Join(restarts, ", "))
		return
	}
	ck.rp.note("worker: running at the end; restart commands: %s", strings.Join(restarts, ", "))
}
