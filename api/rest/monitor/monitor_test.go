package monitor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

func pass(next http.Handler) http.Handler { return next }

func deny(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rest.WriteError(w, errcode.New(errcode.Forbidden, "staff only"))
	})
}

// stack is the real path: HTTP -> producer -> embedded Kafka -> sink ->
// ClickHouse -> read model -> HTTP.
func stack(t *testing.T, brokers *kafka.Config) *httptest.Server {
	t.Helper()
	p, store := backend(t, brokers)
	r := mux.NewRouter()
	monitor.New(p, store, time.Now).Mount(r, pass, pass)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// backend is the producer and the read model of the real path: with
// brokers nil, a private broker and a running requestlog.
func backend(t *testing.T, brokers *kafka.Config) (*requestlogkafka.Producer, *requestlogview.Store) {
	t.Helper()
	_, conn := testenv.ClickHouseMigrated(t)
	var c kafka.Config
	if brokers != nil {
		c = *brokers
	} else {
		c = testenv.Kafka(t, 2)
		sc := sinks.DefaultRequestLogConfig(c)
		sc.BatchWait = 20 * time.Millisecond
		s, err := sinks.NewRequestLogs(sc, conn, testenv.Quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		waitFor(t, func() bool { return s.Ready(ctx) == nil })
	}
	pc := requestlogkafka.DefaultProducerConfig(c)
	if brokers == nil {
		pc.Timeout = 10 * time.Second
	}
	p, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, requestlogview.New(conn, time.Now, func(context.Context) (int64, error) { return 2, nil })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestIngestThenQueryEveryEndpoint(t *testing.T) {
	t.Parallel()
	srv := stack(t, nil)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	body := `[
 {"request_id":"r1","service_name":"a.Svc","method_name":"Get","grpc_status_code":"OK","duration_ms":10,"created_at":"` + now + `","client_ip":"10.1.2.3","user_id":5,"username":"ann","is_authenticated":true,"api_key_id":9,"api_key_name":"ci"},
 {"service_name":"a.Svc","method_name":"Get","status":"bogus"},
 {"request_id":"r3","service_name":"a.Svc","method_name":"List","status":"error","grpc_status_code":"Internal","error_message":"boom","duration_ms":30},
 {"service_name":"","method_name":"Get","status":"success","duration_ms":-4},
 {"request_id":"r5","service_name":"b.Svc","method_name":"Put","grpc_status_code":4,"duration_ms":20},
 {"service_name":"b.Svc","method_name":"Put","status":"success","duration_ms":"slow"},
 {"service_name":"b.Svc","method_name":"Put","status":"success","colour":"red"}
]`
	code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", body)
	// Partly stored: 2xx, so a client that retries on 4xx never doubles
	// the three counted (issue #21 point 6).
	if code != http.StatusAccepted || res["success"] != false || res["accepted"] != 3.0 || res["rejected"] != 4.0 {
		t.Fatalf("ingest: %d %v", code, res)
	}
	var named []string
	for _, e := range res["errors"].([]any) {
		m := e.(map[string]any)
		named = append(named, fmt.Sprintf("%v.%v", m["index"], m["field"]))
	}
	if want := []string{"1.status", "3.service_name", "3.duration_ms", "5.duration_ms", "6.colour"}; !slices.Equal(named, want) {
		t.Fatalf("errors name %v, want %v", named, want)
	}

	var list map[string]any
	waitFor(t, func() bool {
		_, list = do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/", "")
		return list["count"] == 3.0
	})
	if got := keys(list); !slices.Equal(got, []string{"count", "results"}) {
		t.Fatalf("requests keys %v", got)
	}
	results := list["results"].([]any)
	var first map[string]any
	for _, r := range results {
		if m := r.(map[string]any); m["request_id"] == "r1" {
			first = m
		}
	}
	want2_7 := sorted("id", "request_id", "service_name", "method_name", "status", "duration_ms", "grpc_status_code", "error_message",
		"created_at", "client_ip", "user_id", "username", "is_authenticated", "api_key_id", "api_key_name", "reported_by")
	if first == nil || !slices.Equal(keys(first), want2_7) {
		t.Fatalf("request record %v", first)
	}
	if first["status"] != "success" || first["client_ip"] != "10.1.2.3" || first["user_id"] != 5.0 || first["api_key_name"] != "ci" || first["is_authenticated"] != true {
		t.Fatalf("request record %v", first)
	}
	_, filtered := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/?service=b.Svc&status=timeout&page_size=1", "")
	if filtered["count"] != 1.0 || len(filtered["results"].([]any)) != 1 {
		t.Fatalf("filtered %v", filtered)
	}
	// The code sent as 4 is answered and filtered by every spelling.
	for _, sp := range []string{"DEADLINE_EXCEEDED", "DeadlineExceeded", "4"} {
		_, byCode := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/?grpc_status_code="+sp, "")
		if byCode["count"] != 1.0 || byCode["results"].([]any)[0].(map[string]any)["grpc_status_code"] != "DEADLINE_EXCEEDED" {
			t.Fatalf("grpc_status_code=%s: %v", sp, byCode)
		}
	}

	// The rollups are written right after the raw rows.
	var ov map[string]any
	waitFor(t, func() bool {
		code, ov = do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/overview/", "")
		return ov["total_requests"] == 3.0
	})
	if code != 200 || !slices.Equal(keys(ov), sorted("total_requests", "successful_requests", "failed_requests", "success_rate", "avg_duration_ms", "total_services", "active_api_keys")) {
		t.Fatalf("overview %d %v", code, ov)
	}
	if ov["total_requests"] != 3.0 || ov["successful_requests"] != 1.0 || ov["failed_requests"] != 2.0 || ov["avg_duration_ms"] != 20.0 ||
		ov["total_services"] != 2.0 || ov["active_api_keys"] != 2.0 || fmt.Sprintf("%.4f", ov["success_rate"]) != "33.3333" {
		t.Fatalf("overview %v", ov)
	}

	_, sv := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/services/?hours=1", "")
	rows := sv["services"].([]any)
	if len(rows) != 2 || !slices.Equal(keys(rows[0].(map[string]any)), sorted("service_name", "total_requests", "successful_requests", "failed_requests", "success_rate", "avg_duration_ms", "methods_count", "p95_duration_ms")) {
		t.Fatalf("services %v", sv)
	}
	if a := rows[0].(map[string]any); a["service_name"] != "a.Svc" || a["methods_count"] != 2.0 || a["success_rate"] != 50.0 {
		t.Fatalf("a.Svc %v", a)
	}

	_, mv := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/methods/?service=b.Svc", "")
	ms := mv["methods"].([]any)
	if len(ms) != 1 || !slices.Equal(keys(ms[0].(map[string]any)), sorted("service_name", "method_name", "total_requests", "successful_requests", "failed_requests", "success_rate", "avg_duration_ms", "min_duration_ms", "max_duration_ms", "p95_duration_ms")) {
		t.Fatalf("methods %v", mv)
	}
	if m := ms[0].(map[string]any); m["method_name"] != "Put" || m["min_duration_ms"] != 20.0 || m["max_duration_ms"] != 20.0 || m["failed_requests"] != 1.0 {
		t.Fatalf("Put %v", m)
	}

	_, tl := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/timeline/?hours=1", "")
	if !slices.Equal(keys(tl), sorted("hours", "step_seconds", "service", "points")) || tl["step_seconds"] != 60.0 || len(tl["points"].([]any)) != 60 {
		t.Fatalf("timeline %v", tl)
	}
	var req, failed float64
	for _, p := range tl["points"].([]any) {
		m := p.(map[string]any)
		if !slices.Equal(keys(m), sorted("time", "requests", "failed", "error_rate")) {
			t.Fatalf("timeline point %v", m)
		}
		req, failed = req+m["requests"].(float64), failed+m["failed"].(float64)
	}
	if req != 3 || failed != 2 {
		t.Fatalf("timeline sums %v requests, %v failed; want 3 and 2", req, failed)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := stack(t, &kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1})
	cases := []struct{ method, path, body string }{
		{"POST", "/api/grpc/monitor/ingest/", `{"service_name":"a"}`},
		{"POST", "/api/grpc/monitor/ingest/", `[]`},
		{"POST", "/api/grpc/monitor/ingest/", `not json`},
		{"POST", "/api/grpc/monitor/ingest/", ``},
		{"POST", "/api/grpc/monitor/ingest/", `[{"service_name":"a","method_name":"b","status":"pending"}] trailing`},
		{"POST", "/api/grpc/monitor/ingest/", `[1, "x"]`},
		{"POST", "/api/grpc/monitor/ingest/", `[{"service_name":"a","method_name":"b","status":"success","created_at":"yesterday"}]`},
	}
	for _, p := range []string{"overview", "services", "methods"} {
		for _, h := range []string{"0", "8761", "-1", "abc", "1.5", ""} {
			if h == "" {
				h = "%20"
			}
			cases = append(cases, struct{ method, path, body string }{"GET", "/api/grpc/monitor/" + p + "/?hours=" + h, ""})
		}
	}
	for _, h := range []string{"0", "721", "-1", "abc", "1.5", "%20"} {
		cases = append(cases, struct{ method, path, body string }{"GET", "/api/grpc/monitor/timeline/?hours=" + h, ""})
	}
	for _, q := range []string{"page_size=0", "page_size=1001", "page_size=-1", "page_size=abc", "page=0", "page=x", "status=weird",
		"grpc_status_code=17", "grpc_status_code=Nope", "service=%zz", "method=a%", "status=%zz&page=1"} {
		cases = append(cases, struct{ method, path, body string }{"GET", "/api/grpc/monitor/requests/?" + q, ""})
	}
	// A query that does not decode is a 400, never a dropped filter.
	for _, p := range []string{"overview", "services", "methods", "timeline"} {
		cases = append(cases, struct{ method, path, body string }{"GET", "/api/grpc/monitor/" + p + "/?service=%zz", ""})
	}
	for _, c := range cases {
		code, res := do(t, c.method, srv.URL+c.path, c.body)
		if code != http.StatusBadRequest || res["success"] != false {
			t.Errorf("%s %s %.40q: %d %v, want 400", c.method, c.path, c.body, code, res)
		}
	}
}

func TestIngestAnswers503WithinASecondWhenKafkaIsDown(t *testing.T) {
	t.Parallel()
	srv := stack(t, &kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1})
	for range 3 {
		start := time.Now()
		code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", `[{"service_name":"a","method_name":"b","status":"success"}]`)
		if took := time.Since(start); code != http.StatusServiceUnavailable || took > 1500*time.Millisecond {
			t.Fatalf("%d %v after %v, want 503 within about a second", code, res, took)
		}
	}
}

func TestEndpointsAreBehindTheirMiddleware(t *testing.T) {
	r := mux.NewRouter()
	monitor.New(nil, nil, time.Now).Mount(r, deny, deny)
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, p := range []string{"requests", "overview", "services", "methods", "timeline"} {
		if code, _ := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/"+p+"/", ""); code != http.StatusForbidden {
			t.Errorf("%s: %d", p, code)
		}
	}
	if code, _ := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", "[]"); code != http.StatusForbidden {
		t.Errorf("ingest: %d", code)
	}
}

func TestEveryRouteIsDocumented(t *testing.T) {
	spec, err := os.ReadFile("../../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	monitor.New(nil, nil, time.Now).Mount(r, pass, pass)
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if tpl, err := route.GetPathTemplate(); err == nil && !strings.Contains(string(spec), "\n  "+tpl+":\n") {
			t.Errorf("docs/openapi.yaml does not describe %s", tpl)
		}
		return nil
	})
}

// Issue #21 point 6: a batch of which nothing is stored is a 400 naming
// each event in errcode's field shape; Kafka is never asked.
func TestIngestAllRefusedIs400WithEveryEvent(t *testing.T) {
	t.Parallel()
	srv := stack(t, &kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1})
	code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/",
		`[{"service_name":"a","method_name":"b","status":"bogus"},{"service_name":"a","method_name":"b","grpc_status_code":1.5},{"service_name":"a","method_name":"b","status":"success","created_at":"1971-01-01T00:00:00Z"}]`)
	fields, _ := res["fields"].(map[string]any)
	if code != http.StatusBadRequest || res["code"] != "invalid" || len(fields) != 3 ||
		fields["events[0].status"] == nil || fields["events[1].grpc_status_code"] == nil || fields["events[2].created_at"] == nil {
		t.Fatalf("%d %v", code, res)
	}
}

// Issue #20 point 11: the body is read as a stream and refused with 413
// as soon as it passes the event or the byte limit.
func TestIngestOverLimitsIs413(t *testing.T) {
	t.Parallel()
	srv := stack(t, &kafka.Config{Brokers: []string{"127.0.0.1:1"}, Partitions: 1})
	ev := `{"service_name":"a","method_name":"b","status":"success"}`
	for name, body := range map[string]string{
		"events": "[" + strings.Repeat(ev+",", monitor.MaxIngestEvents) + ev + "]",
		"bytes":  `[{"service_name":"a","method_name":"b","status":"success","error_message":"` + strings.Repeat("x", monitor.MaxIngestBytes) + `"}]`,
		// Past the event limit even when the rest would not parse.
		"events then garbage": "[" + strings.Repeat(ev+",", monitor.MaxIngestEvents+1) + "garbage",
	} {
		code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", body)
		if code != http.StatusRequestEntityTooLarge || res["code"] != "too_large" {
			t.Errorf("%s: %d %v, want 413", name, code, res)
		}
	}
}

func TestDecodeEventsNDJSON(t *testing.T) {
	body := `{"service_name":"a","method_name":"b","status":"success","grpc_status_code":"4"}
{"service_name":"a","colour":"red"}
{"service_name":"a","method_name":"c","grpc_status_code":0}
`
	batch, refused, err := monitor.DecodeEvents(strings.NewReader(body), true, 10)
	if err != nil || len(batch) != 3 || len(refused) != 1 || refused[0].Index != 1 || refused[0].Field != "colour" ||
		batch[0].GRPCStatusCode != "4" || batch[2].GRPCStatusCode != "0" {
		t.Fatalf("%v %v %v", batch, refused, err)
	}
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add([]byte(`[{"service_name":"a","method_name":"b","status":"success","grpc_status_code":4}]`), false)
	f.Add([]byte(`[{"service_name":"a"}, 1, "x", null, {"grpc_status_code":"DeadlineExceeded"}]`), false)
	f.Add([]byte("{\"service_name\":\"a\"}\n{\"method_name\":2}\n"), true)
	f.Add([]byte(`[`), false)
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		batch, refused, err := monitor.DecodeEvents(strings.NewReader(string(body)), ndjson, 50)
		if err != nil {
			// Only the one error type, and only 400 or 413.
			var e *errcode.Error
			if !errors.As(err, &e) || (e.Code != errcode.BadRequest && e.Code != errcode.TooLarge) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(batch) == 0 || len(batch) > 50 || len(refused) > len(batch) {
			t.Fatalf("%d events, %d refused", len(batch), len(refused))
		}
		for i, r := range refused {
			if r.Index < 0 || r.Index >= len(batch) || (i > 0 && r.Index <= refused[i-1].Index) {
				t.Fatalf("refusal %d at %d of %d", i, r.Index, len(batch))
			}
		}
	})
}

// keyedIngest serves the monitor over p and store with idem (closed when
// the test ends) and returns its ingest URL.
func keyedIngest(t *testing.T, p *requestlogkafka.Producer, store *requestlogview.Store, idem *requestlogview.Idempotency) string {
	t.Helper()
	r := mux.NewRouter()
	monitor.New(p, store, time.Now).WithIdempotency(idem).Mount(r, pass, pass)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL + "/api/grpc/monitor/ingest/"
}

func post(t *testing.T, url, key, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(monitor.HeaderIdempotencyKey, key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// Issue #21 point 5: a repeated Idempotency-Key gets the first answer and
// counts nothing again, also when the copies arrive at once; the same key
// with another body is refused.
func TestIngestIdempotencyKey(t *testing.T) {
	t.Parallel()
	p, store := backend(t, nil)
	idem := requestlogview.NewIdempotency(testenv.Postgres(t), time.Now, 10*time.Second)
	url := keyedIngest(t, p, store, idem)
	body := `[{"service_name":"idem.Svc","method_name":"A","status":"success"},{"service_name":"idem.Svc","method_name":"B","status":"bogus"}]`

	code, first, _ := post(t, url, "k1", body)
	if code != http.StatusAccepted || !strings.Contains(first, `"accepted":1`) {
		t.Fatalf("first: %d %s", code, first)
	}
	code, again, h := post(t, url, "k1", body)
	if code != http.StatusAccepted || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat: %d %s %v", code, again, h)
	}
	code, other, _ := post(t, url, "k1", strings.Replace(body, `"A"`, `"C"`, 1))
	if code != http.StatusConflict || !strings.Contains(other, `"code":"conflict"`) {
		t.Fatalf("other body: %d %s", code, other)
	}
	// Eight copies at once: one runs, the others get its answer.
	var wg sync.WaitGroup
	answers := make([]string, 8)
	codes := make([]int, 8)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], answers[i], _ = post(t, url, "k2", body)
		}()
	}
	wg.Wait()
	for i := range answers {
		if codes[i] != http.StatusAccepted || answers[i] != answers[0] {
			t.Fatalf("copy %d: %d %s (first %s)", i, codes[i], answers[i], answers[0])
		}
	}
	// A batch of which nothing is stored is remembered too (400).
	bad := `[{"service_name":"idem.Svc","method_name":"B","status":"bogus"}]`
	c1, b1, _ := post(t, url, "k3", bad)
	c2, b2, _ := post(t, url, "k3", bad)
	if c1 != http.StatusBadRequest || c2 != c1 || b2 != b1 {
		t.Fatalf("refused batch: %d %s then %d %s", c1, b1, c2, b2)
	}
	// Exactly two events counted (k1 once, k2 once); a last batch without
	// a key shows the sink has passed everything sent before it.
	if code, res, _ := post(t, url, "", `[{"service_name":"idem.Last","method_name":"A","status":"success"}]`); code != http.StatusAccepted {
		t.Fatalf("last: %d %s", code, res)
	}
	ctx := context.Background()
	waitFor(t, func() bool {
		_, n, err := store.Requests(ctx, requestlogview.Filter{Service: "idem.Last"})
		return err == nil && n == 1
	})
	time.Sleep(time.Second) // the other partition's records
	if _, n, err := store.Requests(ctx, requestlogview.Filter{Service: "idem.Svc"}); err != nil || n != 2 {
		t.Fatalf("idem.Svc counted %d times (%v), want 2", n, err)
	}
}

// Issue 28 point 6: what a key remembers is the outcome with its first
// requestlog.MaxKeyedErrors errors (a few KiB for 500 refused events,
// where the answer stored before was 162 KB), the first answer lists
// the same as its replays, and one caller's keys are bounded: past its
// bytes a new key is 429 with Retry-After, while a call without a key
// still runs.
func TestIngestIdempotencyStoresSmallOutcomesAndBoundsTheCaller(t *testing.T) {
	t.Parallel()
	p, store := backend(t, nil)
	pool := testenv.Postgres(t)
	idem := requestlogview.NewIdempotency(pool, time.Now, 10*time.Second).WithCallerBytes(64 << 10)
	url := keyedIngest(t, p, store, idem)
	events := make([]string, 500)
	for i := range events {
		events[i] = fmt.Sprintf(`{"service_name":"idem.Big","method_name":"M%d","status":"not-a-status-%d","grpc_status_code":"NOT_A_CODE_%d"}`, i, i, i)
	}
	body := "[" + strings.Join(events, ",") + "]"

	code, first, _ := post(t, url, "big-1", body)
	var res rest.ErrorBody
	if err := json.Unmarshal([]byte(first), &res); err != nil || code != http.StatusBadRequest || len(res.Fields) != requestlog.MaxKeyedErrors {
		t.Fatalf("first: %d, %d fields (%v): %.300s", code, len(res.Fields), err, first)
	}
	if code, again, h := post(t, url, "big-1", body); code != http.StatusBadRequest || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %.300s", code, again)
	}
	var size int
	if err := pool.QueryRow(context.Background(), `SELECT octet_length(outcome) + coalesce(octet_length(answer), 0) FROM requestlog_idempotency WHERE key = 'big-1'`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	// The outcome, and for one release the answer the build before
	// outcomes reads: each holds the first 50 errors.
	if size > 20<<10 {
		t.Fatalf("the outcome of 500 refused events is stored in %d bytes, want at most 20 KiB", size)
	}
	t.Logf("body %d bytes, outcome stored in %d bytes", len(body), size)

	refused := 0
	for i := range 30 {
		code, answer, h := post(t, url, fmt.Sprintf("big-%d", i+2), body)
		if code == http.StatusBadRequest {
			continue
		}
		if code != http.StatusTooManyRequests || !strings.Contains(answer, `"code":"rate_limited"`) || h.Get("Retry-After") == "" {
			t.Fatalf("key %d: %d %s %v", i+2, code, answer, h)
		}
		refused = i + 2
		break
	}
	// 64 KiB holds about ten such outcomes.
	if refused < 5 || refused > 20 {
		t.Fatalf("the caller's bound refused key %d, want about the 10th", refused)
	}
	if code, answer, _ := post(t, url, "", body); code != http.StatusBadRequest {
		t.Fatalf("without a key: %d %.300s", code, answer)
	}
	if code, again, h := post(t, url, "big-1", body); code != http.StatusBadRequest || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay past the bound: %d %.300s", code, again)
	}
}
