package grpcadmin_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/events/apikey"
)

func basic(email, password string) []string {
	return []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(email+":"+password))}
}

const password = "admin password 1"

// adminEnv is a stack with one superuser; it returns their Basic header.
func adminEnv(t *testing.T) (*grpctest.Env, string, []string) {
	e := grpctest.Start(t)
	admin := authtest.Email("admin")
	e.Superuser(t, admin, password)
	return e, admin, basic(admin, password)
}

var keyFields = []string{"id", "name", "key_type", "masked_key", "is_active", "is_valid", "user_id", "username",
	"user_email", "request_count", "last_used_at", "expires_at", "created_at", "created_by"}

func TestAPIKeyListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e, admin, hdr := adminEnv(t)
	other := authtest.Email("owner")
	otherID := e.SignIn(t, other).UserID
	exp := e.Clock.Now().Add(time.Hour)
	a := e.NewKey(t, "a", apikey.TypeService, admin, nil)
	e.NewKey(t, "b", apikey.TypeCLI, other, &exp)
	c := e.NewKey(t, "c", apikey.TypeService, other, nil)
	if _, err := e.Revoke.Handle(context.Background(), revoke(c.State.ID)); err != nil {
		t.Fatal(err)
	}
	e.WaitProjected(t, "apikey.keys", apikey.Stream(c.State.ID))

	r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/", nil, hdr...)
	if r.Status != http.StatusOK || r.Body["count"] != 3.0 || r.Body["next"] != nil || r.Body["previous"] != nil {
		t.Fatalf("list: %d %s", r.Status, r.Raw)
	}
	first := r.Body["results"].([]any)[0].(map[string]any)
	for _, f := range keyFields {
		if _, ok := first[f]; !ok {
			t.Errorf("a key record lacks %s: %v", f, first)
		}
	}
	if first["name"] != "c" || first["is_active"] != false || first["is_valid"] != false || first["request_count"] != 0.0 ||
		first["last_used_at"] != nil || first["username"] != other || first["user_email"] != other || first["created_by"] != "test" {
		t.Fatalf("newest key: %v", first)
	}

	tests := []struct {
		query string
		names string
	}{
		{"is_active=true", "b,a"},
		{"is_active=false", "c"},
		{"key_type=service", "c,a"},
		{"key_type=webhook", ""},
		{fmt.Sprintf("user_id=%d", otherID), "c,b"},
		{fmt.Sprintf("user_id=%d&is_active=true&key_type=cli", otherID), "b"},
		{"page_size=1", "c"},
		{"page_size=1&page=2", "b"},
		{"page_size=1&page=3", "a"},
		{"page_size=1&page=4", ""},
		{"page_size=1000", "c,b,a"},
	}
	for _, tc := range tests {
		r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/?"+tc.query, nil, hdr...)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.query, r.Status, r.Raw)
		}
		var names []string
		for _, k := range r.Body["results"].([]any) {
			names = append(names, k.(map[string]any)["name"].(string))
		}
		if got := strings.Join(names, ","); got != tc.names {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.names)
		}
	}
	r = e.Do(t, http.MethodGet, "/api/grpc/api-keys/?page_size=1&page=2&key_type=service", nil, hdr...)
	if r.Body["count"] != 2.0 || r.Body["next"] != nil || r.Body["previous"] != "/api/grpc/api-keys/?key_type=service&page=1&page_size=1" {
		t.Fatalf("links: %s", r.Raw)
	}
	r = e.Do(t, http.MethodGet, "/api/grpc/api-keys/?page_size=1", nil, hdr...)
	if r.Body["next"] != "/api/grpc/api-keys/?page=2&page_size=1" {
		t.Fatalf("next link: %s", r.Raw)
	}
	_ = a
}

func TestAPIKeyListRejectsBadParameters(t *testing.T) {
	t.Parallel()
	e, _, hdr := adminEnv(t)
	tests := []struct{ query, field string }{
		{"page_size=0", "page_size"},
		{"page_size=1001", "page_size"},
		{"page_size=-1", "page_size"},
		{"page_size=abc", "page_size"},
		{"page_size=", "page_size"},
		{"page=0", "page"},
		{"page=-1", "page"},
		{"page=abc", "page"},
		{"page=1.5", "page"},
		{"is_active=maybe", "is_active"},
		{"key_type=admin", "key_type"},
		{"user_id=abc", "user_id"},
		{"user_id=-3", "user_id"},
		{"user_id=99999999999999999999", "user_id"},
	}
	for _, tc := range tests {
		r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/?"+tc.query, nil, hdr...)
		if r.Status != http.StatusBadRequest || r.Str("code") != "invalid" || r.Field(tc.field) == "" {
			t.Errorf("%s: %d %s", tc.query, r.Status, r.Raw)
		}
	}
	// A query that does not decode is refused, never a dropped filter.
	for _, q := range []string{"key_type=%zz", "is_active=true&user_id=%zz", "page_size=1;page=2", "%zz=1"} {
		r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/?"+q, nil, hdr...)
		if r.Status != http.StatusBadRequest || r.Body["success"] != false || r.Str("code") != "bad_request" {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
}

func TestAPIKeyDetailAndStats(t *testing.T) {
	t.Parallel()
	e, admin, hdr := adminEnv(t)
	past := e.Clock.Now().Add(time.Minute)
	k := e.NewKey(t, "detail", apikey.TypeWebhook, admin, &past)
	e.NewKey(t, "dev", apikey.TypeDevelopment, admin, nil)

	r := e.Do(t, http.MethodGet, fmt.Sprintf("/api/grpc/api-keys/%d/", k.State.ID), nil, hdr...)
	if r.Status != http.StatusOK || r.Body["name"] != "detail" || r.Body["is_valid"] != true || r.Body["masked_key"] != k.Key[:4]+"..."+k.Key[len(k.Key)-4:] {
		t.Fatalf("detail: %d %s", r.Status, r.Raw)
	}
	for _, f := range keyFields {
		if _, ok := r.Body[f]; !ok {
			t.Errorf("detail lacks %s", f)
		}
	}
	for _, p := range []string{"999999/", "0/", "-1/", "abc/", "99999999999999999999/"} {
		if r := e.Do(t, http.MethodGet, "/api/grpc/api-keys/"+p, nil, hdr...); r.Status != http.StatusNotFound {
			t.Errorf("detail %s: %d %s", p, r.Status, r.Raw)
		}
	}

	e.Clock.Advance(2 * time.Minute) // the webhook key expires
	r = e.Do(t, http.MethodGet, fmt.Sprintf("/api/grpc/api-keys/%d/", k.State.ID), nil, hdr...)
	if r.Body["is_valid"] != false || r.Body["is_active"] != true {
		t.Fatalf("expired detail: %s", r.Raw)
	}
	r = e.Do(t, http.MethodGet, "/api/grpc/api-keys/stats/", nil, hdr...)
	byType := r.Obj("keys_by_type")
	if r.Status != http.StatusOK || r.Body["total_keys"] != 2.0 || r.Body["active_keys"] != 2.0 || r.Body["expired_keys"] != 1.0 ||
		r.Body["total_requests"] != 0.0 || len(byType) != 5 || byType["webhook"] != 1.0 || byType["development"] != 1.0 || byType["service"] != 0.0 {
		t.Fatalf("stats: %d %s", r.Status, r.Raw)
	}
}

// Every endpoint is for staff: no credentials is 401, a user is 403, and
// an API key (a machine credential, never staff) is 403 wherever REST is
// staff only: the key endpoints, health, proto generation and the admin.
func TestEndpointsNeedStaff(t *testing.T) {
	t.Parallel()
	e, admin, _ := adminEnv(t)
	user := e.SignIn(t, authtest.Email("user"))
	// A key of a non-staff user, and one of the superuser: neither is staff.
	owner := authtest.Email("keyowner")
	e.SignIn(t, owner)
	plainKey := e.NewKey(t, "plain", apikey.TypeService, owner, nil).Key
	adminKey := e.NewKey(t, "admin", apikey.TypeService, admin, nil).Key
	staffOnly := []struct{ method, path string }{
		{"GET", "/api/grpc/api-keys/"}, {"GET", "/api/grpc/api-keys/1/"}, {"GET", "/api/grpc/api-keys/stats/"},
		{"GET", "/api/grpc/monitor/health/"}, {"POST", "/cfg/grpc/proto-files/generate/"},
		{"POST", "/admin/api-keys/"}, {"POST", "/admin/api-keys/1/revoke/"},
	}
	for _, p := range staffOnly {
		for name, key := range map[string]string{"non-staff key": plainKey, "superuser's key": adminKey} {
			if r := e.Do(t, p.method, p.path, nil, "X-API-Key", key); r.Status != http.StatusForbidden || r.Str("code") != "forbidden" {
				t.Errorf("%s %s with a %s: %d %s", p.method, p.path, name, r.Status, r.Raw)
			}
		}
		if r := e.Do(t, p.method, p.path, nil, "X-API-Key", plainKey+"x"); r.Status != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d %s", p.method, p.path, r.Status, r.Raw)
		}
	}
	for _, p := range []struct{ method, path string }{
		{"GET", "/api/grpc/api-keys/"}, {"GET", "/api/grpc/api-keys/1/"}, {"GET", "/api/grpc/api-keys/stats/"},
		{"GET", "/api/grpc/monitor/health/"}, {"GET", "/cfg/grpc/proto-files/"}, {"GET", "/cfg/grpc/proto-files/apikeys/"},
		{"GET", "/cfg/grpc/proto-files/download-all/"}, {"POST", "/cfg/grpc/proto-files/generate/"},
		{"POST", "/admin/api-keys/"}, {"POST", "/admin/api-keys/1/revoke/"},
	} {
		if r := e.Do(t, p.method, p.path, nil); r.Status != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d", p.method, p.path, r.Status)
		}
		if r := e.Do(t, p.method, p.path, nil, authtest.Bearer(user.Access)...); r.Status != http.StatusForbidden {
			t.Errorf("%s %s as a user: %d", p.method, p.path, r.Status)
		}
	}
}

func TestMonitorHealthReadsTheLiveServer(t *testing.T) {
	t.Parallel()
	e, _, hdr := adminEnv(t)
	r := e.Do(t, http.MethodGet, "/api/grpc/monitor/health/", nil, hdr...)
	if r.Status != http.StatusOK || r.Body["status"] != "healthy" || r.Body["server_running"] != true ||
		r.Body["registered_services"] != float64(len(e.GRPC.Services())) || r.Body["uptime_seconds"] == nil {
		t.Fatalf("health: %d %s", r.Status, r.Raw)
	}
	e.StopGRPC()
	r = e.Do(t, http.MethodGet, "/api/grpc/monitor/health/", nil, hdr...)
	if r.Status != http.StatusOK || r.Body["status"] != "stopped" || r.Body["server_running"] != false || r.Body["uptime_seconds"] != 0.0 {
		t.Fatalf("health after stop: %d %s", r.Status, r.Raw)
	}
}

var _ = auth.CSRFHeader
