package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/servestack"
)

// senders is how many goroutines post ingest batches (each with an API
// key of its own, so no caller nears the idempotency store's bytes per
// caller and day, requestlogview.DefaultCallerBytes).
const senders = 8

// load is the traffic of a run: paced request-log ingest with an
// Idempotency-Key per batch, probe events timed until queryable, OTP
// sign-ins (with a profile read, a refresh and a logout each), tasks, and
// timed statistics reads with a staff login.
type load struct {
	st    *servestack.Stack
	http  *http.Client
	keys  []string
	staff struct {
		mu             sync.Mutex
		token, refresh string
		at             time.Time
	}
	batch int
	seq   atomic.Int64

	acked, refused, failedPosts, missedSlots atomic.Int64
	signIns, signInFails                     atomic.Int64
	tasks, taskFails                         atomic.Int64
	statsFails                               atomic.Int64
	probesLost                               atomic.Int64
	tasksDone                                int

	mu         sync.Mutex
	probeDelay []time.Duration // since the last sample
	statsTime  []time.Duration
	allProbes  []time.Duration
	allStats   []time.Duration
	firstErrs  []string
}

const staffEmail = "staff@soak.example.com"

func newLoad(ctx context.Context, st *servestack.Stack) (*load, error) {
	l := &load{st: st, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if _, err := st.CLI(ctx, st.CLIEnv, "user", "create-superuser", "--email", staffEmail); err != nil {
		return nil, err
	}
	for i := range senders {
		out, err := st.CLI(ctx, st.CLIEnv, "apikey", "create", "--name", fmt.Sprintf("soak-%d", i), "--type", "service", "--user", staffEmail)
		if err != nil {
			return nil, err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		l.keys = append(l.keys, strings.TrimSpace(lines[len(lines)-1]))
	}
	// The keys are usable once serve's projection has them.
	deadline := time.Now().Add(time.Minute)
	for _, k := range l.keys {
		for {
			code, err := l.ingest(ctx, k, "", l.events("warmup", 1))
			if err == nil && code == http.StatusAccepted {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("API key not usable within a minute (last answer %d, %v)", code, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if _, err := l.staffToken(ctx); err != nil {
		return nil, fmt.Errorf("staff sign-in: %w", err)
	}
	return l, nil
}

type logEvent struct {
	RequestID   string    `json:"request_id"`
	ServiceName string    `json:"service_name"`
	MethodName  string    `json:"method_name"`
	Status      string    `json:"status"`
	DurationMS  int64     `json:"duration_ms"`
	CreatedAt   time.Time `json:"created_at"`
}

var methods = []string{"Get", "List", "Create", "Update", "Delete"}

func (l *load) events(service string, n int) []logEvent {
	now := time.Now().UTC()
	evs := make([]logEvent, n)
	base := l.seq.Add(int64(n)) - int64(n)
	for i := range evs {
		seq := base + int64(i)
		status := "success"
		if seq%50 == 0 {
			status = "error"
		}
		evs[i] = logEvent{RequestID: fmt.Sprintf("%s-%d", service, seq), ServiceName: service, MethodName: methods[seq%5],
			Status: status, DurationMS: seq % 300, CreatedAt: now}
	}
	return evs
}

// ingest posts one batch with API key key (and an Idempotency-Key when
// idem is set) and returns the status code.
func (l *load) ingest(ctx context.Context, key, idem string, evs []logEvent) (int, error) {
	b, err := json.Marshal(evs)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.st.Base+"/api/grpc/monitor/ingest/", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		l.noteErr(fmt.Sprintf("ingest answered %d: %s", resp.StatusCode, bytes.TrimSpace(body)))
	}
	return resp.StatusCode, nil
}

func (l *load) noteErr(s string) {
	l.mu.Lock()
	if len(l.firstErrs) < 10 {
		l.firstErrs = append(l.firstErrs, s)
	}
	l.mu.Unlock()
}

// measure posts batches as fast as senders goroutines can for d, waits
// until every acknowledged event is queryable in the raw table, and
// returns events per second over the whole (first post to last row
// queryable): what the REST ingest path sustains end to end here.
func (l *load) measure(ctx context.Context, d time.Duration) (float64, error) {
	const batch = 1000
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range senders {
		wg.Go(func() {
			for n := 0; bctx.Err() == nil; n++ {
				code, err := l.ingest(bctx, l.keys[w], fmt.Sprintf("burst-%d-%d", w, n), l.events("soak-burst", batch))
				if err == nil && code == http.StatusAccepted {
					acked.Add(batch)
				}
			}
		})
	}
	wg.Wait()
	want := acked.Load()
	for {
		var got uint64
		if err := l.st.CH.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.requestlog_raw WHERE service_name = 'soak-burst'", l.st.CHDB)).Scan(&got); err != nil {
			return 0, err
		}
		if int64(got) >= want {
			break
		}
		if time.Since(start) > d+5*time.Minute {
			return 0, fmt.Errorf("%d of %d burst events queryable after %v", got, want, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	fmt.Printf("soak: burst: %d events acknowledged in %v, queryable after %v\n", want, d, took.Round(time.Millisecond))
	if want == 0 {
		return 0, fmt.Errorf("no burst batch was acknowledged: %v", l.firstErrs)
	}
	return float64(want) / took.Seconds(), nil
}

// run starts the load at rate events/s until ctx ends; wait for it with
// the returned function.
func (l *load) run(ctx context.Context, rate float64) (wait func()) {
	// Batches large enough that the posts stay near 10 a second: each
	// keeps an idempotency row (a day) counted to its key.
	l.batch = max(100, int(rate/10))
	interval := time.Duration(float64(time.Second) * float64(l.batch) / rate)
	fmt.Printf("soak: ingest: batches of %d events every %v (%d senders, one API key each)\n", l.batch, interval, senders)
	var wg sync.WaitGroup
	slots := make(chan struct{}, senders)
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case slots <- struct{}{}:
				default:
					// Every sender is still busy: the rate is not held.
					l.missedSlots.Add(1)
				}
			}
		}
	})
	for w := range senders {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-slots:
				}
				code, err := l.ingest(ctx, l.keys[w], fmt.Sprintf("load-%d-%d", w, n), l.events("soak", l.batch))
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					l.failedPosts.Add(1)
					l.noteErr(err.Error())
				case code == http.StatusAccepted:
					l.acked.Add(int64(l.batch))
				default:
					l.refused.Add(1)
				}
			}
		})
	}
	wg.Go(func() { l.probes(ctx) })
	wg.Go(func() { l.signInLoop(ctx) })
	wg.Go(func() { l.taskLoop(ctx) })
	wg.Go(func() { l.statsLoop(ctx) })
	return wg.Wait
}

// probes sends one stamped event every 200 ms and polls the raw table
// every 100 ms for those not seen yet: the delay from the post to the
// first poll that finds the row (produce to queryable). When the run
// ends it polls a minute more; a probe still not found then is lost, and
// named.
func (l *load) probes(ctx context.Context) {
	pending := map[string]time.Time{}
	send := time.NewTicker(200 * time.Millisecond)
	poll := time.NewTicker(100 * time.Millisecond)
	defer send.Stop()
	defer poll.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			grace, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for len(pending) > 0 && grace.Err() == nil {
				l.pollProbes(grace, pending)
				sleep(grace, 200*time.Millisecond)
			}
			for id, at := range pending {
				l.probesLost.Add(1)
				l.noteErr(fmt.Sprintf("probe %s, acknowledged at %s, not queryable a minute after the run", id, at.UTC().Format(time.TimeOnly)))
			}
			return
		case <-send.C:
			id := fmt.Sprintf("probe-%d", n)
			n++
			at := time.Now()
			ev := []logEvent{{RequestID: id, ServiceName: "soak-probe", MethodName: "Probe", Status: "success", CreatedAt: at.UTC()}}
			code, err := l.ingest(ctx, l.keys[0], "", ev)
			if err == nil && code == http.StatusAccepted {
				pending[id] = at
			}
		case <-poll.C:
			l.pollProbes(ctx, pending)
			// A probe unseen after 5 minutes is lost.
			for id, at := range pending {
				if time.Since(at) > 5*time.Minute {
					delete(pending, id)
					l.probesLost.Add(1)
					l.noteErr(fmt.Sprintf("probe %s, acknowledged at %s, not queryable after 5 minutes", id, at.UTC().Format(time.TimeOnly)))
				}
			}
		}
	}
}

func (l *load) pollProbes(ctx context.Context, pending map[string]time.Time) {
	if len(pending) == 0 {
		return
	}
	ids := make([]string, 0, len(pending))
	for id := range pending {
		ids = append(ids, "'"+id+"'")
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := l.st.CH.Query(qctx, fmt.Sprintf("SELECT request_id FROM %s.requestlog_raw WHERE service_name = 'soak-probe' AND request_id IN (%s)",
		l.st.CHDB, strings.Join(ids, ",")))
	if err != nil {
		return
	}
	defer rows.Close()
	now := time.Now()
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil {
			if at, ok := pending[id]; ok {
				l.mu.Lock()
				l.probeDelay = append(l.probeDelay, now.Sub(at))
				l.allProbes = append(l.allProbes, now.Sub(at))
				l.mu.Unlock()
				delete(pending, id)
			}
		}
	}
}

// post sends body as JSON with an optional Bearer token and decodes a 2xx
// answer into out.
func (l *load) post(ctx context.Context, path, token string, body, out any) (int, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.st.Base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return l.do(req, out)
}

func (l *load) get(ctx context.Context, path, token string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.st.Base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return l.do(req, out)
}

func (l *load) do(req *http.Request, out any) (int, error) {
	resp, err := l.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s answered %d: %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: %w", req.URL.Path, err)
		}
	}
	return resp.StatusCode, nil
}

type tokens struct {
	Tokens struct {
		Access  string `json:"access"`
		Refresh string `json:"refresh"`
	} `json:"tokens"`
}

// signIn is one OTP sign-in of email: request a code, read it from the
// mailbox, verify it.
func (l *load) signIn(ctx context.Context, email string) (tokens, error) {
	var t tokens
	if _, err := l.post(ctx, "/api/auth/otp/request/", "", map[string]string{"identifier": email}, nil); err != nil {
		return t, err
	}
	code, err := l.st.Mail.Code(ctx, email)
	if err != nil {
		return t, err
	}
	if _, err := l.post(ctx, "/api/auth/otp/verify/", "", map[string]string{"identifier": email, "otp_code": code}, &t); err != nil {
		return t, err
	}
	if t.Tokens.Access == "" {
		return t, fmt.Errorf("verify gave no access token")
	}
	return t, nil
}

// staffToken is an access token of the staff user: one OTP sign-in
// (an address may ask for otp.MaxRequestsPerHour codes an hour), then a
// refresh every 10 minutes (access tokens live JWT__ACCESS_TTL, 15).
func (l *load) staffToken(ctx context.Context) (string, error) {
	l.staff.mu.Lock()
	defer l.staff.mu.Unlock()
	if l.staff.token != "" && time.Since(l.staff.at) < 10*time.Minute {
		return l.staff.token, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if l.staff.refresh != "" {
		var r struct {
			Access  string `json:"access"`
			Refresh string `json:"refresh"`
		}
		if _, err := l.post(sctx, "/api/auth/token/refresh/", "", map[string]string{"refresh": l.staff.refresh}, &r); err != nil {
			return "", err
		}
		if r.Refresh != "" {
			l.staff.refresh = r.Refresh
		}
		l.staff.token, l.staff.at = r.Access, time.Now()
		return l.staff.token, nil
	}
	t, err := l.signIn(sctx, staffEmail)
	if err != nil {
		return "", err
	}
	l.staff.token, l.staff.refresh, l.staff.at = t.Tokens.Access, t.Tokens.Refresh, time.Now()
	return l.staff.token, nil
}

// signInLoop runs sign-in cycles one after the other (a sign-in, a
// profile read, a refresh and a logout, which revokes the session), each
// address twice (otp.MaxRequestsPerHour is 3), so users sign up as they
// go.
func (l *load) signInLoop(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		err := l.signInCycle(ctx, fmt.Sprintf("user-%d@soak.example.com", n/2))
		switch {
		case err == nil:
			l.signIns.Add(1)
		case ctx.Err() == nil:
			l.signInFails.Add(1)
			l.noteErr("sign-in: " + err.Error())
		}
		sleep(ctx, time.Second)
	}
}

func (l *load) signInCycle(ctx context.Context, email string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := l.signIn(ctx, email)
	if err != nil {
		return err
	}
	if _, err := l.get(ctx, "/api/profile/", t.Tokens.Access, nil); err != nil {
		return err
	}
	var r struct {
		Access  string `json:"access"`
		Refresh string `json:"refresh"`
	}
	if _, err := l.post(ctx, "/api/auth/token/refresh/", "", map[string]string{"refresh": t.Tokens.Refresh}, &r); err != nil {
		return err
	}
	refresh := t.Tokens.Refresh
	if r.Refresh != "" {
		refresh = r.Refresh
	}
	_, err = l.post(ctx, "/api/auth/logout/", "", map[string]string{"refresh": refresh}, nil)
	return err
}

// taskLoop enqueues a demo:echo task every 2 s with the CLI.
func (l *load) taskLoop(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		_, err := l.st.CLI(ctx, l.st.CLIEnv, "task", "enqueue", "--type", "demo:echo", "--payload", fmt.Sprintf(`{"soak": %d}`, n))
		switch {
		case err == nil:
			l.tasks.Add(1)
		case ctx.Err() == nil:
			l.taskFails.Add(1)
			l.noteErr("task enqueue: " + err.Error())
		}
		sleep(ctx, 2*time.Second)
	}
}

// statsLoop times the overview (24 h) every 500 ms with the staff login.
func (l *load) statsLoop(ctx context.Context) {
	for ctx.Err() == nil {
		tok, err := l.staffToken(ctx)
		if err == nil {
			start := time.Now()
			_, err = l.get(ctx, "/api/grpc/monitor/overview/?hours=24", tok, nil)
			took := time.Since(start)
			if err == nil {
				l.mu.Lock()
				l.statsTime = append(l.statsTime, took)
				l.allStats = append(l.allStats, took)
				l.mu.Unlock()
			}
		}
		if err != nil && ctx.Err() == nil {
			l.statsFails.Add(1)
			l.noteErr("overview: " + err.Error())
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// window returns the p99 of the probe delays and of the statistics reads
// since the last call (NaN when there were none), and starts anew.
func (l *load) window() (probeP99, statsP99 float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	probeP99, statsP99 = p99ms(l.probeDelay), p99ms(l.statsTime)
	l.probeDelay, l.statsTime = l.probeDelay[:0], l.statsTime[:0]
	return probeP99, statsP99
}

func p99ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return nan
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*0.99))
	return float64(s[i]) / float64(time.Millisecond)
}

// check fails the run when the load itself went wrong: more than 1% of
// ingest posts or sign-ins or task enqueues failed, a probe was never
// queryable, or the pacing missed more than 1% of its slots (the machine
// did not keep half its measured rate).
func (l *load) check() []string {
	var out []string
	posts := l.acked.Load()/int64(max(1, l.batch)) + l.refused.Load() + l.failedPosts.Load()
	if bad := l.refused.Load() + l.failedPosts.Load(); bad*100 > posts {
		out = append(out, fmt.Sprintf("ingest: %d of %d posts not acknowledged (at most 1%%); first errors: %v", bad, posts, l.firstErrs))
	}
	if m := l.missedSlots.Load(); m*100 > posts+m {
		out = append(out, fmt.Sprintf("ingest: %d batch slots missed (every sender busy): the rate was not held", m))
	}
	if n := l.probesLost.Load(); n > 0 {
		out = append(out, fmt.Sprintf("ingest: %d acknowledged probe events never became queryable; first errors: %v", n, l.firstErrs))
	}
	if f := l.signInFails.Load(); f*100 > l.signIns.Load()+f {
		out = append(out, fmt.Sprintf("sign-in: %d of %d cycles failed; first errors: %v", f, l.signIns.Load()+f, l.firstErrs))
	}
	if f := l.taskFails.Load(); f*100 > l.tasks.Load()+f {
		out = append(out, fmt.Sprintf("tasks: %d of %d enqueues failed", f, l.tasks.Load()+f))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var done, stuck int
	err := l.st.PG.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'succeeded'),
		count(*) FILTER (WHERE state <> 'succeeded' AND enqueued_at < now() - interval '1 minute') FROM task_runs`).Scan(&done, &stuck)
	switch {
	case err != nil:
		out = append(out, fmt.Sprintf("tasks: reading task_runs: %v", err))
	case stuck > 0:
		out = append(out, fmt.Sprintf("tasks: %d demo:echo tasks enqueued over a minute before the end have not succeeded (%d have)", stuck, done))
	}
	l.tasksDone = done
	if f := l.statsFails.Load(); f > 0 {
		out = append(out, fmt.Sprintf("statistics: %d overview reads failed; first errors: %v", f, l.firstErrs))
	}
	return out
}
