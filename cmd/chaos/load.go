package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/otpmail"
	"github.com/cfgd/cfgd/cmd/internal/rig"
)

func basicAuth(user, pw string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
}

// client is a user of both replicas, as behind a load balancer.
type client struct {
	urls []string
	http *http.Client

	mu sync.Mutex
	// internal counts the 500 answers by route: a dependency's fault is
	// to be answered 503 (retry), an internal error is a defect.
	internal map[string]int
}

// do sends body (JSON, when non-nil) to replica and decodes a 2xx answer
// into out; a 500 is counted by route.
func (c *client) do(ctx context.Context, replica int, method, path string, body any, headers map[string]string, out any) (int, error) {
	code, err := rig.Do(ctx, c.http, method, c.urls[replica%len(c.urls)]+path, body, headers, out)
	if code == http.StatusInternalServerError {
		c.mu.Lock()
		c.internal[method+" "+strings.Split(path, "?")[0]]++
		c.mu.Unlock()
	}
	return code, err
}

// retryable is what a real client retries: a cut connection or a 5xx,
// and the idempotency store's "in progress" (409) and "slow down" (429).
func retryable(code int, err error) bool {
	return err != nil || code >= 500 || code == http.StatusConflict || code == http.StatusTooManyRequests
}

// ledger is everything the load sent and what it got back.
type ledger struct {
	mu sync.Mutex
	// request-log events by request id: sent, and acknowledged (202)
	sent  map[string]bool
	acked map[string]bool
	// atLeastOnce: events of an OTLP export that was retried (OTLP has no
	// idempotency key: a retry after a lost answer may store them twice)
	atLeastOnce map[string]bool
	// calls made with each API key (REST, gRPC and OTLP), by outcome:
	// the bounds of its usage count (usage.go)
	uses      map[int64]*keyUses
	ops       map[string]int // operations by kind and outcome
	badIngest []string       // 4xx other than retryable/auth: the batch is valid, so a defect

	signed    map[string]int64 // e-mail -> user id of sign-ins that got tokens
	reused    []string         // a used OTP code accepted again
	freshBad  []string         // a fresh code refused (4xx) by the replica it was used on
	reuseTrys int

	// revocations (keys, sessions) measured while a dependency was down:
	// their bound rests on the projections, so they are not judged
	excusedLags int

	refreshAfterLogout []string        // a refresh token accepted after its logout was answered
	sessionLags        []time.Duration // from a logout's answer to the last call accepted with its access token

	revoked    map[int64]string // revoked key id -> the key
	revokeLags []time.Duration  // from the revoke's answer to the last call accepted with the key
	lateKeys   []string         // still accepted when the load ended

	tasks     []string // acknowledged task ids
	taskFails int
}

func newLedger() *ledger {
	return &ledger{sent: map[string]bool{}, acked: map[string]bool{}, atLeastOnce: map[string]bool{}, ops: map[string]int{},
		uses: map[int64]*keyUses{}, signed: map[string]int64{}, revoked: map[int64]string{}}
}

func (l *ledger) op(kind string) {
	l.mu.Lock()
	l.ops[kind]++
	l.mu.Unlock()
}

// loader drives the load; stop ends new operations, hard ends retries.
type loader struct {
	c    *client
	r    *deployment
	l    *ledger
	hist *history
	mail *otpmail.Inbox
	seed uint64
}

// every runs do in workers goroutines, again and again with pause between
// calls, until stop ends; wait for them with the returned function.
func every(stop context.Context, workers int, pause time.Duration, do func(worker, seq int)) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; stop.Err() == nil; seq++ {
				do(w, seq)
				select {
				case <-stop.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	return wg.Wait
}

// ingest posts one batch with key, retried with its Idempotency-Key on a
// 5xx or a cut connection, alternating replicas, until acknowledged or
// hard ends. It says whether cfgd acknowledged it. keyID is key's id.
func (ld *loader) ingest(hard context.Context, key string, keyID int64, id string, n, replica int) bool {
	longLived := keyID == ld.r.keyID
	evs := make([]rig.LogEvent, n)
	ld.l.mu.Lock()
	for i := range evs {
		evs[i] = rig.LogEvent{RequestID: fmt.Sprintf("%s-%d", id, i), ServiceName: "chaos", MethodName: "Post", Status: "success", DurationMS: int64(i % 50)}
		ld.l.sent[evs[i].RequestID] = true
	}
	ld.l.mu.Unlock()
	headers := map[string]string{"X-API-Key": key, "Idempotency-Key": id}
	for attempt := 0; ; attempt++ {
		r := replica + attempt
		ctx, cancel := context.WithTimeout(hard, 10*time.Second)
		start := time.Now()
		code, err := ld.c.do(ctx, r, http.MethodPost, "/api/grpc/monitor/ingest/", evs, headers, nil)
		cancel()
		ld.hist.write(map[string]any{"ev": "op", "op": "ingest", "batch": id, "replica": r % 2, "attempt": attempt,
			"status": code, "err": errString(err), "ms": time.Since(start).Milliseconds()})
		ld.l.used(keyID, r, httpUse(code, err))
		switch {
		case err == nil && code == http.StatusAccepted:
			ld.l.mu.Lock()
			for _, e := range evs {
				ld.l.acked[e.RequestID] = true
			}
			ld.l.ops["ingest: batch acknowledged"]++
			if attempt > 0 {
				ld.l.ops["ingest: acknowledged after a retry"]++
			}
			ld.l.mu.Unlock()
			return true
		case err == nil && code == http.StatusUnauthorized:
			if longLived {
				// The long-lived key is never revoked.
				ld.l.mu.Lock()
				ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: 401 with the live key on replica %d", id, r%2))
				ld.l.mu.Unlock()
			} else {
				ld.l.op("ingest: 401 with a new key")
			}
			return false
		case !retryable(code, err):
			ld.l.mu.Lock()
			ld.l.badIngest = append(ld.l.badIngest, fmt.Sprintf("%s: %d", id, code))
			ld.l.mu.Unlock()
			return false
		}
		if err != nil {
			ld.l.op("ingest: cut connection")
		} else {
			ld.l.op(fmt.Sprintf("ingest: %d", code))
		}
		select {
		case <-hard.Done():
			ld.l.op("ingest: batch given up unacknowledged")
			return false
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// ingestLoad is request logs through both replicas with the long-lived key.
func (ld *loader) ingestLoad(stop, hard context.Context) func() {
	return every(stop, 4, 150*time.Millisecond, func(w, seq int) {
		ld.ingest(hard, ld.r.key, ld.r.keyID, fmt.Sprintf("c%d-w%d-%d", ld.seed, w, seq), 20, w)
	})
}

// signIns are OTP sign-ups: the code asked on one replica, used on the
// other, then tried again on both, where it must be refused.
func (ld *loader) signIns(stop, hard context.Context) func() {
	return every(stop, 2, 300*time.Millisecond, func(w, seq int) {
		email := fmt.Sprintf("c%d-%d-%d@example.com", ld.seed, w, seq)
		ld.signIn(hard, email, w+seq)
	})
}

func (ld *loader) signIn(hard context.Context, email string, n int) {
	ctx, cancel := context.WithTimeout(hard, 30*time.Second)
	defer cancel()
	asker, user := n%2, (n+1)%2
	var code int
	var err error
	for attempt := range 3 {
		code, err = ld.c.do(ctx, asker+attempt, http.MethodPost, "/api/auth/otp/request/", map[string]string{"identifier": email}, nil, nil)
		if err == nil && code == http.StatusOK {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	ld.hist.write(map[string]any{"ev": "op", "op": "otp_request", "email": email, "status": code, "err": errString(err)})
	if err != nil || code != http.StatusOK {
		ld.l.op("sign-in: code request failed")
		return
	}
	mctx, mcancel := context.WithTimeout(ctx, 15*time.Second)
	otp, err := ld.mail.Code(mctx, email)
	mcancel()
	if err != nil {
		ld.l.op("sign-in: no mail")
		ld.hist.write(map[string]any{"ev": "op", "op": "otp_mail", "email": email, "err": errString(err)})
		return
	}
	body := map[string]string{"identifier": email, "otp_code": otp}
	var res struct {
		Tokens struct {
			Access  string `json:"access"`
			Refresh string `json:"refresh"`
		} `json:"tokens"`
		User struct {
			ID int64 `json:"id"`
		} `json:"user"`
	}
	code, err = ld.c.do(ctx, user, http.MethodPost, "/api/auth/otp/verify/", body, nil, &res)
	ld.hist.write(map[string]any{"ev": "op", "op": "otp_verify", "email": email, "replica": user, "status": code, "err": errString(err), "user": res.User.ID})
	if err != nil || code >= 500 {
		// Cut off: whether the code was used is unknown.
		ld.l.op("sign-in: verify cut")
		return
	}
	if code != http.StatusOK || res.Tokens.Access == "" {
		ld.l.mu.Lock()
		ld.l.freshBad = append(ld.l.freshBad, fmt.Sprintf("%s on replica %d: %d", email, user, code))
		ld.l.mu.Unlock()
		return
	}
	ld.l.mu.Lock()
	ld.l.signed[email] = res.User.ID
	ld.l.ops["sign-in: tokens"]++
	ld.l.mu.Unlock()
	for r := range 2 {
		code, err := ld.c.do(ctx, r, http.MethodPost, "/api/auth/otp/verify/", body, nil, nil)
		if err != nil || code >= 500 {
			continue
		}
		ld.l.mu.Lock()
		ld.l.reuseTrys++
		if code < 300 {
			ld.l.reused = append(ld.l.reused, fmt.Sprintf("%s on replica %d: %d", email, r, code))
			ld.hist.write(map[string]any{"ev": "violation", "what": "used OTP code accepted again", "email": email, "replica": r})
		}
		ld.l.mu.Unlock()
	}
	// The refresh token works on the other replica.
	if res.Tokens.Refresh == "" {
		return
	}
	code, err = ld.c.do(ctx, asker, http.MethodPost, "/api/auth/token/refresh/", map[string]string{"refresh": res.Tokens.Refresh}, nil, nil)
	ld.hist.write(map[string]any{"ev": "op", "op": "token_refresh", "email": email, "replica": asker, "status": code, "err": errString(err)})
	ld.l.op(fmt.Sprintf("token refresh: %s", outcome(code, err)))
	if n%3 == 0 {
		ld.logout(ctx, email, user, res.Tokens.Access, res.Tokens.Refresh)
	}
}

// logout ends the session on one replica; then its refresh token must
// fail on both at once (refresh reads the session's stream) and its
// access token within JWT__REVOCATION_POLL (1 s) plus the projection lag.
func (ld *loader) logout(ctx context.Context, email string, replica int, access, refresh string) {
	body := map[string]string{"refresh": refresh}
	var code int
	var err error
	for attempt := range 5 {
		code, err = ld.c.do(ctx, replica+attempt, http.MethodPost, "/api/auth/logout/", body, nil, nil)
		ld.hist.write(map[string]any{"ev": "op", "op": "logout", "email": email, "replica": (replica + attempt) % 2, "status": code, "err": errString(err)})
		if !retryable(code, err) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil || code != http.StatusOK {
		ld.l.op("logout: failed " + outcome(code, err))
		return
	}
	loggedOut := time.Now()
	ld.l.op("logout: done")
	for r := range 2 {
		code, err := ld.c.do(ctx, r, http.MethodPost, "/api/auth/token/refresh/", body, nil, nil)
		if err == nil && code < 300 {
			ld.l.mu.Lock()
			ld.l.refreshAfterLogout = append(ld.l.refreshAfterLogout, fmt.Sprintf("%s on replica %d", email, r))
			ld.l.mu.Unlock()
			ld.hist.write(map[string]any{"ev": "violation", "what": "refresh accepted after logout", "email": email, "replica": r})
		}
	}
	bearer := map[string]string{"Authorization": "Bearer " + access}
	refused := [2]bool{}
	var lastAccepted time.Duration
	lastBy := -1
	for !(refused[0] && refused[1]) && ctx.Err() == nil {
		for r := range 2 {
			if refused[r] {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			code, err := ld.c.do(cctx, r, http.MethodGet, "/api/profile/", nil, bearer, nil)
			cancel()
			switch {
			case err == nil && code == http.StatusUnauthorized:
				refused[r] = true
			case err == nil && code == http.StatusOK:
				lastAccepted, lastBy = time.Since(loggedOut), r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	lag := ld.judge(loggedOut, lastAccepted, &ld.l.sessionLags)
	ld.hist.write(map[string]any{"ev": "op", "op": "session_refused", "email": email, "both": refused[0] && refused[1],
		"logout_replica": replica % 2, "last_accepted_ms": lastAccepted.Milliseconds(), "lag_ms": lag.Milliseconds(), "last_accepted_by": lastBy,
		"ms": time.Since(loggedOut).Milliseconds()})
}

func outcome(code int, err error) string {
	if err != nil {
		return "cut"
	}
	return fmt.Sprint(code)
}

// keyChurn creates an API key (staff, REST), uses it, revokes it and
// measures until both replicas refuse it.
func (ld *loader) keyChurn(stop, hard context.Context) func() {
	return every(stop, 1, 2*time.Second, func(_, seq int) {
		ld.churnOne(hard, seq)
	})
}

func (ld *loader) churnOne(hard context.Context, seq int) {
	ctx, cancel := context.WithTimeout(hard, 60*time.Second)
	defer cancel()
	staff := map[string]string{"Authorization": ld.r.staff}
	var res struct {
		Key    string `json:"key"`
		APIKey struct {
			ID int64 `json:"id"`
		} `json:"api_key"`
	}
	body := map[string]any{"name": fmt.Sprintf("churn-%d", seq), "key_type": "service", "user_email": staffEmail}
	code, err := ld.c.do(ctx, seq, http.MethodPost, "/admin/api-keys/", body, staff, &res)
	ld.hist.write(map[string]any{"ev": "op", "op": "apikey_create", "seq": seq, "replica": seq % 2, "status": code, "err": errString(err), "id": res.APIKey.ID})
	if err != nil || code != http.StatusCreated || res.Key == "" {
		ld.l.op("api key: create failed " + outcome(code, err))
		return
	}
	ld.l.op("api key: created")
	ld.ingest(ctx, res.Key, res.APIKey.ID, fmt.Sprintf("c%d-k%d", ld.seed, seq), 5, seq+1)
	path := fmt.Sprintf("/admin/api-keys/%d/revoke/", res.APIKey.ID)
	for attempt := 0; ; attempt++ {
		code, err = ld.c.do(ctx, seq+attempt, http.MethodPost, path, nil, staff, nil)
		ld.hist.write(map[string]any{"ev": "op", "op": "apikey_revoke", "id": res.APIKey.ID, "attempt": attempt, "status": code, "err": errString(err)})
		if err == nil && code == http.StatusOK {
			break
		}
		if !retryable(code, err) || ctx.Err() != nil {
			ld.l.op("api key: revoke failed " + outcome(code, err))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	revokedAt := time.Now()
	ld.l.mu.Lock()
	ld.l.revoked[res.APIKey.ID] = res.Key
	ld.l.ops["api key: revoked"]++
	ld.l.mu.Unlock()
	// Both replicas must refuse it; a probe is a 1-event batch, counted in
	// the ledger like any other when it is acknowledged. What counts is
	// the last acceptance after the revoke's answer: a replica that is
	// down or paused answers nothing, which is no acceptance.
	refused := [2]bool{}
	var lastAccepted time.Duration
	for probe := 0; !(refused[0] && refused[1]); probe++ {
		if ctx.Err() != nil {
			ld.hist.write(map[string]any{"ev": "op", "op": "apikey_revoke_probe", "id": res.APIKey.ID, "result": "not refused by both within 60s"})
			break
		}
		for r := range 2 {
			if refused[r] {
				continue
			}
			code, err := ld.ingestOnce(ctx, res.Key, res.APIKey.ID, fmt.Sprintf("c%d-k%d-p%d-r%d", ld.seed, seq, probe, r), r)
			switch {
			case err == nil && code == http.StatusUnauthorized:
				refused[r] = true
			case err == nil && code == http.StatusAccepted:
				lastAccepted = time.Since(revokedAt)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	lag := ld.judge(revokedAt, lastAccepted, &ld.l.revokeLags)
	ld.hist.write(map[string]any{"ev": "op", "op": "apikey_refused", "id": res.APIKey.ID, "both": refused[0] && refused[1],
		"last_accepted_ms": lastAccepted.Milliseconds(), "lag_ms": lag.Milliseconds(), "ms": time.Since(revokedAt).Milliseconds()})
}

// judge writes down a revocation answered at at whose last accepted call
// came lastAccepted after it (0: none): its lag goes into lags (a ledger
// field, written under the ledger's lock), or, when a dependency's fault
// excuses it, it is counted as not judged. It returns the lag.
func (ld *loader) judge(at time.Time, lastAccepted time.Duration, lags *[]time.Duration) time.Duration {
	lag := revocationLag(ld.r.sup, at, lastAccepted)
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	if revocationExcused(ld.r.sup, at, lastAccepted) {
		ld.l.excusedLags++
	} else {
		*lags = append(*lags, lag)
	}
	return lag
}

// projectionRetry is the projections' longest wait between two tries
// (projections.RunnerConfig.MaxBackoff's default): after Postgres or the
// broker is back, a projection may wait that long before it moves again.
const projectionRetry = 5 * time.Second

// revocationExcused says whether a revocation answered at at is not judged:
// Postgres or the broker, the path its bound rests on, was down or paused
// between a projection's longest retry wait (and a second) before it and
// the last accepted call.
func revocationExcused(sup *supervisor, at time.Time, lastAccepted time.Duration) bool {
	return sup.dependencyFaulted(at.Add(-projectionRetry-time.Second), at.Add(lastAccepted))
}

// revocationLag is how long after a revoke answered at at a call was last
// accepted (lastAccepted after it; 0: none), counted from when every serve
// replica that was stopped meanwhile was back (supervisor.servesBackAt).
func revocationLag(sup *supervisor, at time.Time, lastAccepted time.Duration) time.Duration {
	if lastAccepted <= 0 {
		return 0
	}
	accepted := at.Add(lastAccepted)
	return max(accepted.Sub(sup.servesBackAt(at, accepted)), 0)
}

// ingestOnce posts one event once with key (of id keyID) and returns the
// answer; an acknowledged event goes into the ledger.
func (ld *loader) ingestOnce(ctx context.Context, key string, keyID int64, id string, replica int) (int, error) {
	ev := []rig.LogEvent{{RequestID: id, ServiceName: "chaos", MethodName: "Probe", Status: "success"}}
	ld.l.mu.Lock()
	ld.l.sent[id] = true
	ld.l.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	code, err := ld.c.do(cctx, replica, http.MethodPost, "/api/grpc/monitor/ingest/", ev, map[string]string{"X-API-Key": key}, nil)
	ld.l.used(keyID, replica, httpUse(code, err))
	if err == nil && code == http.StatusAccepted {
		ld.l.mu.Lock()
		ld.l.acked[id] = true
		ld.l.mu.Unlock()
	}
	return code, err
}

// tasks enqueues demo:echo and demo:sleep tasks with the CLI, as an application would
// through cfgd's enqueuer.
func (ld *loader) tasks(stop, hard context.Context) func() {
	return every(stop, 1, 1500*time.Millisecond, func(_, seq int) {
		// One in four sleeps 2 s, so that a worker restart or kill cuts
		// tasks in flight.
		typ, payload := "demo:echo", fmt.Sprintf(`{"n": %d}`, seq)
		if seq%4 == 3 {
			typ, payload = "demo:sleep", `{"ms": 2000}`
		}
		out, err := ld.r.cli(hard, 30*time.Second, "task", "enqueue", "--queue", "default", "--type", typ, "--payload", payload)
		id := ""
		if err == nil {
			id = strings.TrimSpace(out[strings.LastIndex(out, ":")+1:])
		}
		ld.hist.write(map[string]any{"ev": "op", "op": "task_enqueue", "seq": seq, "type": typ, "id": id, "err": errString(err)})
		ld.l.mu.Lock()
		defer ld.l.mu.Unlock()
		if err != nil || id == "" {
			ld.l.taskFails++
			ld.l.ops["task: enqueue failed"]++
			return
		}
		ld.l.tasks = append(ld.l.tasks, id)
		ld.l.ops["task: enqueued"]++
	})
}

// queueOps pauses the default queue and resumes it (staff REST, each a
// command the tasks.control reactor carries out), retried until answered.
func (ld *loader) queueOps(stop, hard context.Context) func() {
	return every(stop, 1, 15*time.Second, func(_, seq int) {
		for _, action := range []string{"pause", "resume"} {
			ld.queueAction(hard, action, seq)
			time.Sleep(2 * time.Second)
		}
	})
}

func (ld *loader) queueAction(hard context.Context, action string, seq int) {
	body := map[string]string{"action": action, "queue_name": "default"}
	staff := map[string]string{"Authorization": ld.r.staff}
	for attempt := 0; hard.Err() == nil; attempt++ {
		ctx, cancel := context.WithTimeout(hard, 10*time.Second)
		code, err := ld.c.do(ctx, seq+attempt, http.MethodPost, "/api/tasks/queue-manage/", body, staff, nil)
		cancel()
		ld.hist.write(map[string]any{"ev": "op", "op": "queue_" + action, "seq": seq, "attempt": attempt, "status": code, "err": errString(err)})
		if err == nil && code == http.StatusOK {
			ld.l.op("queue: " + action)
			return
		}
		if !retryable(code, err) {
			ld.l.op(fmt.Sprintf("queue: %s refused %d", action, code))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	ld.l.op("queue: " + action + " given up")
}

// workerID is the chaos worker's TASKS__WORKER_ID.
const workerID = "chaos-worker"

// workerRestarts restarts the worker every 20 s with cfgd's worker
// command (staff REST `POST /api/tasks/worker-manage/`, action restart: an
// event the worker carries out, its tasks in flight given
// TASKS__SHUTDOWN_TIMEOUT and put back on their queue), retried until
// answered. A worker that is down or paused has no live registration:
// 404, written down and not retried.
func (ld *loader) workerRestarts(stop, hard context.Context) func() {
	return every(stop, 1, 20*time.Second, func(_, seq int) {
		body := map[string]string{"action": "restart", "worker_id": workerID}
		staff := map[string]string{"Authorization": ld.r.staff}
		for attempt := 0; hard.Err() == nil; attempt++ {
			var res struct {
				Worker struct {
					State    string `json:"state"`
					Restarts int    `json:"restarts"`
				} `json:"worker"`
			}
			ctx, cancel := context.WithTimeout(hard, 15*time.Second)
			code, err := ld.c.do(ctx, seq+attempt, http.MethodPost, "/api/tasks/worker-manage/", body, staff, &res)
			cancel()
			ld.hist.write(map[string]any{"ev": "op", "op": "worker_restart", "seq": seq, "attempt": attempt, "status": code, "err": errString(err),
				"state": res.Worker.State, "restarts": res.Worker.Restarts})
			switch {
			case err == nil && code == http.StatusOK:
				ld.l.op("worker restart: done, " + res.Worker.State)
				return
			case err == nil && code == http.StatusAccepted:
				ld.l.op("worker restart: accepted, not yet carried out")
				return
			case err == nil && code == http.StatusNotFound:
				ld.l.op("worker restart: no live worker (down or paused)")
				return
			case !retryable(code, err):
				ld.l.op(fmt.Sprintf("worker restart: refused %d", code))
				return
			}
			time.Sleep(time.Second)
		}
		ld.l.op("worker restart: given up")
	})
}
