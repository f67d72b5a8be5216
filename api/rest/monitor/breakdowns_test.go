package monitor_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest/monitor"
)

// The page's endpoints over the real path: they leave cfgd's own traffic
// out unless include_internal=true, and the request list follows a window
// when asked.
func TestPageEndpoints(t *testing.T) {
	t.Parallel()
	srv := stack(t, nil)
	now := time.Now().UTC()
	at := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339Nano) }
	body := `[
 {"request_id":"k1","service_name":"shop.Orders","method_name":"Get","grpc_status_code":"OK","duration_ms":10,"created_at":"` + at(0) + `","api_key_id":9,"api_key_name":"ci","user_id":5,"username":"ann"},
 {"request_id":"k2","service_name":"shop.Orders","method_name":"Get","grpc_status_code":"NotFound","duration_ms":30,"created_at":"` + at(time.Minute) + `","api_key_id":9,"api_key_name":"ci"},
 {"request_id":"u1","service_name":"shop.Orders","method_name":"List","grpc_status_code":"OK","duration_ms":20,"created_at":"` + at(2*time.Minute) + `","user_id":5,"username":"ann"},
 {"request_id":"a1","service_name":"shop.Orders","method_name":"List","grpc_status_code":"Internal","error_message":"boom","duration_ms":40,"created_at":"` + at(3*time.Minute) + `"},
 {"request_id":"old","service_name":"shop.Orders","method_name":"List","grpc_status_code":"OK","duration_ms":40,"created_at":"` + at(3*time.Hour) + `"},
 {"request_id":"h1","service_name":"grpc.health.v1.Health","method_name":"Check","grpc_status_code":"OK","duration_ms":1,"created_at":"` + at(0) + `"},
 {"request_id":"r1","service_name":"grpc.reflection.v1.ServerReflection","method_name":"ServerReflectionInfo","grpc_status_code":"OK","duration_ms":1,"created_at":"` + at(0) + `"}
]`
	if code, res := do(t, http.MethodPost, srv.URL+"/api/grpc/monitor/ingest/", body); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %v", code, res)
	}
	waitFor(t, func() bool {
		_, l := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/", "")
		return l["count"] == 7.0
	})
	ids := func(path string) ([]string, float64) {
		t.Helper()
		code, l := do(t, http.MethodGet, srv.URL+path, "")
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", path, code, l)
		}
		var out []string
		for _, r := range l["results"].([]any) {
			out = append(out, r.(map[string]any)["request_id"].(string))
		}
		slices.Sort(out)
		return out, l["count"].(float64)
	}
	for path, want := range map[string][]string{
		"/api/grpc/monitor/requests/":                                    {"a1", "h1", "k1", "k2", "old", "r1", "u1"},
		"/api/grpc/monitor/requests/?hours=1":                            {"a1", "h1", "k1", "k2", "r1", "u1"},
		"/api/grpc/monitor/requests/?hours=1&include_internal=false":     {"a1", "k1", "k2", "u1"},
		"/api/grpc/monitor/requests/?include_internal=false&hours=24":    {"a1", "k1", "k2", "old", "u1"},
		"/api/grpc/monitor/requests/?include_internal=true&status=error": {"a1", "k2"},
	} {
		if got, n := ids(path); !slices.Equal(got, want) || n != float64(len(want)) {
			t.Errorf("%s: %v (%v), want %v", path, got, n, want)
		}
	}

	// One request in full, by the id the list gives.
	_, l := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/?status=error&method=List", "")
	id := l["results"].([]any)[0].(map[string]any)["id"].(float64)
	code, one := do(t, http.MethodGet, fmt.Sprintf("%s/api/grpc/monitor/requests/%d/", srv.URL, int64(id)), "")
	if code != http.StatusOK || one["request_id"] != "a1" || one["error_message"] != "boom" || one["id"] != id {
		t.Fatalf("request %v: %d %v", id, code, one)
	}
	if code, res := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/requests/987654321/", ""); code != http.StatusNotFound || res["code"] != "not_found" {
		t.Fatalf("unknown id: %d %v", code, res)
	}

	callers := func(q string) map[string]float64 {
		t.Helper()
		code, res := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/callers/"+q, "")
		if code != http.StatusOK {
			t.Fatalf("callers%s: %d %v", q, code, res)
		}
		out := map[string]float64{}
		for _, c := range res["callers"].([]any) {
			m := c.(map[string]any)
			if !slices.Equal(keys(m), sorted("reported_by", "claimed_kind", "claimed_id", "claimed_name", "total_requests", "successful_requests", "failed_requests", "success_rate", "avg_duration_ms")) {
				t.Fatalf("caller %v", m)
			}
			// Posted without a principal: no reporter.
			if m["reported_by"] != "" {
				t.Fatalf("caller %v: reported_by", m)
			}
			out[fmt.Sprintf("%v:%v:%v", m["claimed_kind"], m["claimed_id"], m["claimed_name"])] = m["total_requests"].(float64)
		}
		return out
	}
	waitFor(t, func() bool { return len(callers("?hours=1")) == 3 })
	if got := callers("?hours=1"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{"anonymous:0:": 1, "api_key:9:ci": 2, "user:5:ann": 1}) {
		t.Errorf("callers %v", got)
	}
	if got := callers("?hours=1&include_internal=true"); got["anonymous:0:"] != 3 {
		t.Errorf("callers with internal traffic %v", got)
	}
	if got := callers("?hours=1&limit=1"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{"api_key:9:ci": 2}) {
		t.Errorf("top caller %v", got)
	}

	_, sc := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/status-codes/?hours=1", "")
	codes := map[string]float64{}
	for _, c := range sc["status_codes"].([]any) {
		m := c.(map[string]any)
		if !slices.Equal(keys(m), sorted("grpc_status_code", "requests", "share", "avg_duration_ms")) {
			t.Fatalf("status code %v", m)
		}
		codes[m["grpc_status_code"].(string)] = m["share"].(float64)
	}
	if fmt.Sprint(codes) != fmt.Sprint(map[string]float64{"INTERNAL": 25, "NOT_FOUND": 25, "OK": 50}) {
		t.Errorf("status codes %v", codes)
	}

	// The rollups hold a row a moment after the raw table does (ClickHouse
	// commits an insert's raw part before its views' parts): the raw rows
	// seen above do not mean the latency series has them yet.
	var lat map[string]any
	waitFor(t, func() bool {
		code, lat = do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/latency/?hours=1", "")
		if code != http.StatusOK {
			return true
		}
		var n float64
		for _, p := range lat["points"].([]any) {
			n += p.(map[string]any)["requests"].(float64)
		}
		return n >= 4
	})
	if code != http.StatusOK || !slices.Equal(keys(lat), sorted("hours", "step_seconds", "service", "include_internal", "points")) || len(lat["points"].([]any)) != 60 {
		t.Fatalf("latency %d %v", code, lat)
	}
	var reqs float64
	points := lat["points"].([]any)
	for i, p := range points {
		m := p.(map[string]any)
		if !slices.Equal(keys(m), sorted("time", "requests", "failed", "error_rate", "p50_ms", "p95_ms", "p99_ms", "partial")) || m["partial"] != (i == len(points)-1) {
			t.Fatalf("latency point %d %v", i, m)
		}
		reqs += m["requests"].(float64)
		if m["requests"] == 0.0 && m["p95_ms"] != nil {
			t.Fatalf("empty point with a p95: %v", m)
		}
	}
	if reqs != 4 {
		t.Errorf("latency counts %v requests, want the 4 outside ones", reqs)
	}
}

func TestPageEndpointsBadInput(t *testing.T) {
	t.Parallel()
	srv := stack(t, nil)
	for _, c := range []struct {
		path   string
		status int
		field  string
	}{
		{"/api/grpc/monitor/latency/?hours=0", 400, "hours"},
		{"/api/grpc/monitor/latency/?hours=721", 400, "hours"},
		{"/api/grpc/monitor/latency/?include_internal=maybe", 400, "include_internal"},
		{"/api/grpc/monitor/callers/?hours=8761", 400, "hours"},
		{"/api/grpc/monitor/callers/?limit=0", 400, "limit"},
		{"/api/grpc/monitor/callers/?limit=101", 400, "limit"},
		{"/api/grpc/monitor/callers/?include_internal=yes", 400, "include_internal"},
		{"/api/grpc/monitor/status-codes/?hours=x", 400, "hours"},
		{"/api/grpc/monitor/requests/?hours=0", 400, "hours"},
		{"/api/grpc/monitor/requests/?include_internal=2", 400, "include_internal"},
		{"/api/grpc/monitor/requests/abc/", 400, "id"},
		{"/api/grpc/monitor/requests/-1/", 400, "id"},
		{"/api/grpc/monitor/requests/99999999999999999999999/", 400, "id"},
	} {
		code, res := do(t, http.MethodGet, srv.URL+c.path, "")
		fields, _ := res["fields"].(map[string]any)
		if code != c.status || fields[c.field] == nil {
			t.Errorf("%s: %d %v, want %d naming %s", c.path, code, res, c.status, c.field)
		}
	}
}

// A query that does not decode is refused, never a dropped filter; the
// same query, well encoded, is answered.
func TestPageEndpointsRefuseAQueryThatDoesNotDecode(t *testing.T) {
	t.Parallel()
	srv := stack(t, nil)
	for _, p := range []string{"latency", "callers", "status-codes"} {
		for _, c := range []struct {
			query  string
			status int
		}{
			{"hours=1&service=a.b", 200},
			{"hours=1&service=%zz", 400},
			{"service=a%", 400},
			{"hours=1;service=a.b", 400},
		} {
			path := "/api/grpc/monitor/" + p + "/?" + c.query
			code, res := do(t, http.MethodGet, srv.URL+path, "")
			if code != c.status || c.status == 400 && (res["success"] != false || res["code"] != "bad_request") {
				t.Errorf("%s: %d %.200v, want %d", path, code, res, c.status)
			}
		}
	}
}

func TestPageEndpointsAreStaffOnly(t *testing.T) {
	r := mux.NewRouter()
	monitor.New(nil, nil, time.Now).Mount(r, deny, pass)
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, p := range []string{"latency/", "callers/", "status-codes/", "requests/1/"} {
		if code, _ := do(t, http.MethodGet, srv.URL+"/api/grpc/monitor/"+p, ""); code != http.StatusForbidden {
			t.Errorf("%s: %d", p, code)
		}
	}
}
