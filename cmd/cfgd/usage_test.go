package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// serve counts a key's usage from the requests the key authenticated, at
// server time, and never from what a report claims: key A posts events
// claiming key B, dated 2105; B stays unused, and A counts one request per
// POST, last used when the server saw it. It also reports the consumer in
// /readyz and serves the monitoring page.
func TestServeCountsAPIKeyUsage(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	baseEnv(t, pgURL)
	// A database of its own: the shared one holds higher offsets of
	// earlier runs' topics, under which the sink would skip these rows.
	opts, _ := testenv.ClickHouse(t)
	t.Setenv("CLICKHOUSE__URL", fmt.Sprintf("clickhouse://%s/%s", opts.Addr[0], opts.Auth.Database))
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"user", "create-superuser", "--email", "usage@example.com", "--password", "usage password 1"}, &out, &errOut); err != nil {
		t.Fatalf("create-superuser: %v %s", err, errOut.String())
	}
	newKey := func(name string) (key, id string) {
		t.Helper()
		out.Reset()
		if err := run(context.Background(), []string{"apikey", "create", "--name", name, "--type", "service", "--user", "usage@example.com"}, &out, &errOut); err != nil {
			t.Fatalf("apikey create: %v %s", err, errOut.String())
		}
		return regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(out.String()), regexp.MustCompile(`id=(\d+)`).FindStringSubmatch(out.String())[1]
	}
	keyA, idA := newKey("a")
	keyB, idB := newKey("b")
	r := start(t)

	// Reports claiming key B: one at a time within the window (stored, as
	// reported data), one in 2105 (refused by the created_at window: the
	// post is a partial 202).
	forged := time.Date(2105, 6, 1, 0, 0, 0, 0, time.UTC)
	recent := time.Now().UTC().Add(-time.Minute)
	svc := "usage.Test"
	body := fmt.Sprintf(`[{"service_name":%[3]q,"method_name":"m","status":"success","api_key_id":%[1]s,"created_at":%[4]q},
		{"service_name":%[3]q,"method_name":"m","status":"error","api_key_id":%[1]s,"created_at":%[2]q},
		{"service_name":%[3]q,"method_name":"m","status":"success"}]`, idB, forged.Format(time.RFC3339Nano), svc, recent.Format(time.RFC3339Nano))
	postAs := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, r.base+"/api/grpc/monitor/ingest/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	post := func() int { t.Helper(); return postAs(keyA) }
	// The key works once the serve process has projected it; until then
	// it is refused (401) and nothing is counted.
	before := time.Now()
	var code int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code = post(); code != http.StatusUnauthorized {
			break
		}
	}
	if code != http.StatusAccepted {
		t.Fatalf("ingest answered %d\n%s", code, r.stderr)
	}
	if code := post(); code != http.StatusAccepted {
		t.Fatalf("second ingest answered %d", code)
	}
	after := time.Now()
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	usage := func(id string) (n int64, last *time.Time) {
		t.Helper()
		if err := conn.QueryRow(context.Background(), `SELECT request_count, last_used_at FROM api_keys WHERE id = $1`, id).Scan(&n, &last); err != nil {
			t.Fatal(err)
		}
		return n, last
	}
	var n int64
	var last *time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && n < 2; time.Sleep(100 * time.Millisecond) {
		n, last = usage(idA)
	}
	if n != 2 || last == nil || last.Before(before.Truncate(time.Microsecond)) || last.After(after) {
		t.Fatalf("key A: request_count %d, last_used_at %v; want 2, between %v and %v", n, last, before, after)
	}
	// The ingested events are in the topic before the 202, and the usage
	// of A was applied: a count of B's would have been applied by now too.
	time.Sleep(500 * time.Millisecond)
	if n, last := usage(idB); n != 0 || last != nil {
		t.Fatalf("key B, only claimed by A's reports: request_count %d, last_used_at %v; want 0, never", n, last)
	}
	// Each row records who reported it (A), beside what it claims (B);
	// a report cannot name its reporter.
	var list struct {
		Results []struct {
			APIKeyID   int64  `json:"api_key_id"`
			ReportedBy string `json:"reported_by"`
		} `json:"results"`
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && len(list.Results) < 4; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, r.base+"/api/grpc/monitor/requests/?service="+svc, nil)
		req.SetBasicAuth("usage@example.com", "usage password 1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(&list)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("requests: %d %v", res.StatusCode, err)
		}
	}
	if len(list.Results) != 4 {
		t.Fatalf("%d rows listed, want 4 (two of each post)", len(list.Results))
	}
	for _, row := range list.Results {
		if row.ReportedBy != "api_key:"+idA || (row.APIKeyID != 0 && fmt.Sprint(row.APIKeyID) != idB) {
			t.Errorf("row %+v, want reported by api_key:%s, claiming %s or none", row, idA, idB)
		}
	}
	// The callers breakdown keys rows by the reporter cfgd checked and
	// the claim: B's own report is one row, A's claims of B another,
	// reported by A, never one that looks like B's own.
	body = fmt.Sprintf(`[{"service_name":%q,"method_name":"m","status":"success","api_key_id":%s,"api_key_name":"b"}]`, svc, idB)
	if code := postAs(keyB); code != http.StatusAccepted {
		t.Fatalf("B's own report answered %d", code)
	}
	type caller struct {
		ReportedBy  string `json:"reported_by"`
		ClaimedKind string `json:"claimed_kind"`
		ClaimedID   int64  `json:"claimed_id"`
		Total       int64  `json:"total_requests"`
	}
	want := []caller{
		{"api_key:" + idA, "anonymous", 0, 2},
		{"api_key:" + idA, "api_key", mustInt(t, idB), 2},
		{"api_key:" + idB, "api_key", mustInt(t, idB), 1},
	}
	var callers struct {
		Callers []caller `json:"callers"`
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && fmt.Sprint(callers.Callers) != fmt.Sprint(want); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, r.base+"/api/grpc/monitor/callers/?hours=1&service="+svc, nil)
		req.SetBasicAuth("usage@example.com", "usage password 1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(res.Body).Decode(&callers)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("callers: %d %v", res.StatusCode, err)
		}
	}
	if fmt.Sprint(callers.Callers) != fmt.Sprint(want) {
		t.Errorf("callers %+v, want %+v", callers.Callers, want)
	}
	body = `[{"service_name":"s","method_name":"m","status":"success","reported_by":"api_key:` + idB + `"}]`
	if code := post(); code != http.StatusBadRequest {
		t.Errorf("a report naming its reporter answered %d, want 400", code)
	}
	if body := waitStatus(t, r.base+"/readyz", 200); !strings.Contains(body, `"name":"apikey-usage","ok":true`) {
		t.Errorf("/readyz does not report apikey-usage ok: %s", body)
	}
	if code, page := get(t, r.base+pages.PathMonitorDashboard); code != http.StatusUnauthorized || !strings.Contains(page, `id="login"`) {
		t.Errorf("dashboard without a session: %d %.200s", code, page)
	}
	src := regexp.MustCompile(`src="(/static/cfgd/login\.js\?v=[0-9a-f]+)"`).FindStringSubmatch(func() string { _, p := get(t, r.base+pages.PathMonitorDashboard); return p }())
	if src == nil {
		t.Fatal("the sign-in form links no versioned login.js")
	}
	if code, _ := get(t, r.base+src[1]); code != http.StatusOK {
		t.Errorf("%s: %d", src[1], code)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
