package grpcadmin_test

import (
	"context"
	"fmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/commands/apikeys"
)

func revoke(id int64) apikeys.Revoke { return apikeys.Revoke{ID: id, RevokedBy: "test"} }

// sessionHeaders logs admin in and returns the cookie header with and
// without the CSRF header.
func sessionHeaders(t *testing.T, e interface {
	Do(testing.TB, string, string, any, ...string) authtest.Response
}, admin string) (withCSRF, withoutCSRF []string) {
	t.Helper()
	r := e.Do(t, http.MethodPost, "/api/auth/login/", map[string]string{"email": admin, "password": password})
	if r.Status != http.StatusOK {
		t.Fatalf("login: %d %s", r.Status, r.Raw)
	}
	var sess, csrf string
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		switch c.Name {
		case auth.SessionCookie:
			sess = c.Value
		case auth.CSRFCookie:
			csrf = c.Value
		}
	}
	cookie := auth.SessionCookie + "=" + sess + "; " + auth.CSRFCookie + "=" + csrf
	return []string{"Cookie", cookie, auth.CSRFHeader, csrf}, []string{"Cookie", cookie}
}

func TestAdminCreatesAndRevokesKeys(t *testing.T) {
	t.Parallel()
	e, admin, _ := adminEnv(t)
	owner := authtest.Email("owner")
	ownerID := e.SignIn(t, owner).UserID
	withCSRF, withoutCSRF := sessionHeaders(t, e, admin)
	body := map[string]any{"name": "ci", "key_type": "cli", "user_email": strings.ToUpper(owner),
		"expires_at": e.Clock.Now().Add(720 * time.Hour).UTC().Format(time.RFC3339)}

	if r := e.Do(t, http.MethodPost, "/admin/api-keys/", body, withoutCSRF...); r.Status != http.StatusForbidden || r.Str("code") != "csrf_failed" {
		t.Fatalf("create without CSRF: %d %s", r.Status, r.Raw)
	}
	r := e.Do(t, http.MethodPost, "/admin/api-keys/", body, withCSRF...)
	key := r.Str("key")
	rec := r.Obj("api_key")
	// The one answer holding the full key is never cached.
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("create answered Cache-Control %q, want no-store", cc)
	}
	if r.Status != http.StatusCreated || !strings.HasPrefix(key, "cfgd_") || len(key) < 48 || rec["masked_key"] != key[:4]+"..."+key[len(key)-4:] ||
		rec["user_id"] != float64(ownerID) || rec["created_by"] != admin || rec["is_valid"] != true || rec["expires_at"] == nil {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	id := int64(rec["id"].(float64))
	// Read-your-writes: the list has it at once.
	if r := e.Do(t, http.MethodGet, fmt.Sprintf("/api/grpc/api-keys/%d/", id), nil, withCSRF...); r.Status != http.StatusOK {
		t.Fatalf("detail after create: %d %s", r.Status, r.Raw)
	}
	if _, err := e.App.Auth.APIKey(context.Background(), key); err != nil {
		t.Fatalf("the new key does not authenticate: %v", err)
	}

	revokePath := fmt.Sprintf("/admin/api-keys/%d/revoke/", id)
	if r := e.Do(t, http.MethodPost, revokePath, nil, withoutCSRF...); r.Status != http.StatusForbidden {
		t.Fatalf("revoke without CSRF: %d %s", r.Status, r.Raw)
	}
	for range 2 { // a second revoke changes nothing
		r = e.Do(t, http.MethodPost, revokePath, nil, withCSRF...)
		if r.Status != http.StatusOK || r.Obj("api_key")["is_active"] != false || r.Obj("api_key")["is_valid"] != false {
			t.Fatalf("revoke: %d %s", r.Status, r.Raw)
		}
	}
	if n := e.EventCount(t, fmt.Sprintf("apikey-%d", id), "apikey.revoked"); n != 1 {
		t.Fatalf("%d revoked events", n)
	}
	if r := e.Do(t, http.MethodPost, "/admin/api-keys/999999/revoke/", nil, withCSRF...); r.Status != http.StatusNotFound {
		t.Fatalf("revoke unknown: %d %s", r.Status, r.Raw)
	}

	bad := []struct {
		body  any
		field string
	}{
		{map[string]any{"key_type": "cli", "user_email": owner}, "name"},
		{map[string]any{"name": strings.Repeat("n", 101), "key_type": "cli", "user_email": owner}, "name"},
		{map[string]any{"name": "x", "key_type": "root", "user_email": owner}, "key_type"},
		{map[string]any{"name": "x", "key_type": "cli", "user_email": "not-an-address"}, "user_email"},
		{map[string]any{"name": "x", "key_type": "cli", "user_email": authtest.Email("nobody")}, "user_email"},
		{map[string]any{"name": "x", "key_type": "cli", "user_email": owner, "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"},
	}
	for _, b := range bad {
		r := e.Do(t, http.MethodPost, "/admin/api-keys/", b.body, withCSRF...)
		if r.Status != http.StatusBadRequest || r.Field(b.field) == "" {
			t.Errorf("create %v: %d %s", b.body, r.Status, r.Raw)
		}
	}
	for _, raw := range []string{`{"name": "x", "key_type": "cli", "user_email": "` + owner + `", "extra": 1}`, `{`, `[]`, `{"name": 5}`,
		`{"name": "x", "key_type": "cli", "user_email": "` + owner + `", "expires_at": "tomorrow"}`} {
		if r := e.Do(t, http.MethodPost, "/admin/api-keys/", raw, withCSRF...); r.Status != http.StatusBadRequest {
			t.Errorf("create %s: %d %s", raw, r.Status, r.Raw)
		}
	}
}

// After creation the full key is in no answer, no log line and no table:
// only its hash and masked form are kept.
func TestFullKeyIsNeverStoredOrShownAgain(t *testing.T) {
	t.Parallel()
	e, admin, hdr := adminEnv(t)
	withCSRF, _ := sessionHeaders(t, e, admin)
	r := e.Do(t, http.MethodPost, "/admin/api-keys/", map[string]any{"name": "secret", "key_type": "service", "user_email": admin}, withCSRF...)
	key := r.Str("key")
	if r.Status != http.StatusCreated || key == "" {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	id := int64(r.Obj("api_key")["id"].(float64))
	// Use the key everywhere it is accepted, and read every view.
	var answers []string
	for _, p := range []string{"/api/grpc/api-keys/", fmt.Sprintf("/api/grpc/api-keys/%d/", id), "/api/grpc/api-keys/stats/", "/api/grpc/monitor/health/"} {
		answers = append(answers, string(e.Do(t, http.MethodGet, p, nil, hdr...).Raw))
	}
	for _, p := range []string{"/cfg/grpc/proto-files/", "/cfg/grpc/proto-files/apikeys/"} {
		r := e.Do(t, http.MethodGet, p, nil, "X-API-Key", key)
		if r.Status != http.StatusOK {
			t.Fatalf("%s with the key: %d", p, r.Status)
		}
		answers = append(answers, string(r.Raw))
	}
	// And over gRPC, so the interceptors' log lines are searched too.
	grpcCtx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	// A key is not staff: the refusal is logged and answered, and holds
	// no part of the key either.
	if _, err := apikeysv1.NewAPIKeyServiceClient(e.Conn).List(grpcCtx, &apikeysv1.ListRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("key service with a key: %v", err)
	} else {
		answers = append(answers, err.Error())
	}
	answers = append(answers, string(e.Do(t, http.MethodPost, fmt.Sprintf("/admin/api-keys/%d/revoke/", id), nil, withCSRF...).Raw))
	if _, err := apikeysv1.NewAPIKeyServiceClient(e.Conn).List(grpcCtx, &apikeysv1.ListRequest{}); err == nil {
		// Within the cache TTL the key may still pass; either way the
		// call is logged.
		t.Log("revoked key still inside the authenticator's cache TTL")
	}
	answers = append(answers, string(e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/", nil, "X-API-Key", key).Raw))

	secretParts := []string{key, key[len("cfgd_"):], key[5:20], key[20:40]}
	for _, a := range answers {
		for _, s := range secretParts {
			if strings.Contains(a, s) {
				t.Fatalf("an answer holds the key: %s", a)
			}
		}
	}
	if logs := e.Logs.String(); !strings.Contains(logs, `"grpc.service":"cfgd.apikeys.v1.APIKeyService"`) || !strings.Contains(logs, `"msg":"http request"`) {
		t.Fatalf("the servers' log lines were not captured:\n%s", logs)
	}
	for _, s := range secretParts {
		if strings.Contains(e.Logs.String(), s) {
			t.Fatal("a log line holds the key")
		}
	}
	// Every table of the database, as text.
	ctx := context.Background()
	rows, err := e.Pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	if len(tables) < 5 {
		t.Fatalf("found only tables %v", tables)
	}
	for _, tbl := range tables {
		for _, s := range secretParts {
			var n int
			if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` t WHERE strpos(t::text, $1) > 0`, s).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				t.Fatalf("table %s holds the key", tbl)
			}
		}
	}
	var stored string
	if err := e.Pool.QueryRow(ctx, `SELECT key_hash FROM api_keys WHERE id = $1`, id).Scan(&stored); err != nil || len(stored) != 64 {
		t.Fatalf("stored hash %q: %v", stored, err)
	}
}
