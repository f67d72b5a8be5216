package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// serve feeds the keys' request_count and last_used_at from the request
// log, reports the consumer in /readyz and serves the monitoring page.
func TestServeCountsAPIKeyUsage(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	baseEnv(t, pgURL)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"user", "create-superuser", "--email", "usage@example.com"}, &out, &errOut); err != nil {
		t.Fatalf("create-superuser: %v %s", err, errOut.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"apikey", "create", "--name", "svc", "--type", "service", "--user", "usage@example.com"}, &out, &errOut); err != nil {
		t.Fatalf("apikey create: %v %s", err, errOut.String())
	}
	key := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(out.String())
	id := regexp.MustCompile(`id=(\d+)`).FindStringSubmatch(out.String())[1]
	r := start(t)

	at := time.Now().UTC().Truncate(time.Millisecond)
	body := fmt.Sprintf(`[{"service_name":"s","method_name":"m","status":"success","api_key_id":%[1]s,"created_at":%[2]q},
		{"service_name":"s","method_name":"m","status":"error","api_key_id":%[1]s,"created_at":%[3]q},
		{"service_name":"s","method_name":"m","status":"success"}]`, id, at.Add(-time.Minute).Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
	// The key works once the serve process has projected it.
	var code int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, r.base+"/api/grpc/monitor/ingest/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if code = res.StatusCode; code == http.StatusAccepted {
			break
		}
	}
	if code != http.StatusAccepted {
		t.Fatalf("ingest answered %d", code)
	}
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	var last *time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && n < 2; time.Sleep(100 * time.Millisecond) {
		if err := conn.QueryRow(context.Background(), `SELECT request_count, last_used_at FROM api_keys WHERE id = $1`, id).Scan(&n, &last); err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 || last == nil || !last.Equal(at) {
		t.Fatalf("request_count %d, last_used_at %v; want 2, %v", n, last, at)
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
