package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
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
func backend(t *testing.T, brokers *kafka.Config) (*requestlog.Producer, *requestlogview.Store) {
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
	pc := requestlog.DefaultProducerConfig(c)
	if brokers == nil {
		pc.Timeout = 10 * time.Second
	}
	p, err := requestlog.NewProducer(pc, testenv.Quiet())
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
 {"request_id":"r5","service_name":"b.Svc","method_name":"Put","grpc_status_code":"DeadlineExceeded","duration_ms":20},
 {"service_name":"b.Svc","method_name":"Put","status":"success","duration_ms":"slow"},
 {"service_name":"b.Svc","method_name":"Put","status":"success","colour":"red"}
]`
	code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", body)
	if code != http.StatusBadRequest || res["accepted"] != 3.0 || res["rejected"] != 4.0 {
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
		"created_at", "client_ip", "user_id", "username", "is_authenticated", "api_key_id", "api_key_name")
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
		{"POST", "/api/grpc/monitor/ingest/", "[" + strings.Repeat(`{},`, monitor.MaxIngestEvents) + "{}]"},
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
	for _, q := range []string{"page_size=0", "page_size=1001", "page_size=-1", "page_size=abc", "page=0", "page=x", "status=weird"} {
		cases = append(cases, struct{ method, path, body string }{"GET", "/api/grpc/monitor/requests/?" + q, ""})
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
