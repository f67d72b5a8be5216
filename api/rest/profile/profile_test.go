package profile_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
)

const path = "/api/profile/"

func TestProfileGetAndPatch(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("profile"))
	bearer := authtest.Bearer(s.Access)

	r := e.Do(t, http.MethodGet, path, nil, bearer...)
	if r.Status != http.StatusOK {
		t.Fatalf("get: %d %s", r.Status, r.Raw)
	}
	p := r.Obj("profile")
	if p["bio"] != "" || p["phone"] != "" || p["date_of_birth"] != nil || p["avatar"] != nil || p["created_at"] == nil {
		t.Fatalf("new profile: %s", r.Raw)
	}
	created := p["updated_at"]

	r = e.Do(t, http.MethodPatch, path, map[string]any{
		"first_name": "  Ada ", "last_name": "Lovelace", "bio": "Analyst.\nEngines.", "phone": "+44 (20) 7946-0000", "date_of_birth": "1815-12-10",
	}, bearer...)
	if r.Status != http.StatusBadRequest || r.Field("date_of_birth") != "must be in 1900 or later" {
		t.Fatalf("1815: %d %s", r.Status, r.Raw)
	}
	r = e.Do(t, http.MethodPatch, path, map[string]any{
		"first_name": "  Ada ", "last_name": "Lovelace", "bio": "Analyst.\nEngines.", "phone": "+44 (20) 7946-0000", "date_of_birth": "1995-12-10",
	}, bearer...)
	if r.Status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.Status, r.Raw)
	}
	u, p := r.Obj("user"), r.Obj("profile")
	if u["first_name"] != "Ada" || u["last_name"] != "Lovelace" || u["full_name"] != "Ada Lovelace" || u["short_name"] != "Ada" ||
		p["bio"] != "Analyst.\nEngines." || p["phone"] != "+44 (20) 7946-0000" || p["date_of_birth"] != "1995-12-10" || p["updated_at"] == created {
		t.Fatalf("after patch: %s", r.Raw)
	}
	// Read-your-writes: the next GET shows the change.
	if r := e.Do(t, http.MethodGet, path, nil, bearer...); r.Obj("user")["first_name"] != "Ada" || r.Obj("profile")["date_of_birth"] != "1995-12-10" {
		t.Fatalf("get after patch: %s", r.Raw)
	}
	// A partial patch leaves the rest; null clears the date.
	r = e.Do(t, http.MethodPatch, path, map[string]any{"bio": "", "date_of_birth": nil}, bearer...)
	if r.Status != http.StatusOK || r.Obj("profile")["bio"] != "" || r.Obj("profile")["date_of_birth"] != nil || r.Obj("user")["first_name"] != "Ada" {
		t.Fatalf("partial patch: %d %s", r.Status, r.Raw)
	}
	// The verify answer after a profile change carries the new names.
	code := e.RequestCode(t, r.Obj("user")["email"].(string))
	v := e.Verify(t, r.Obj("user")["email"].(string), code)
	if v.Obj("user")["first_name"] != "Ada" || v.Obj("user")["last_name"] != "Lovelace" {
		t.Fatalf("verify after change: %s", v.Raw)
	}
}

func TestProfilePatchFieldErrors(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	s := e.SignIn(t, authtest.Email("errors"))
	bearer := authtest.Bearer(s.Access)
	tests := []struct {
		body  string
		field string
		msg   string
	}{
		{`{"first_name": "` + strings.Repeat("a", 31) + `"}`, "first_name", "must be at most 30 characters"},
		{`{"last_name": "` + strings.Repeat("é", 31) + `"}`, "last_name", "must be at most 30 characters"},
		{`{"phone": "` + strings.Repeat("1", 21) + `"}`, "phone", "must be at most 20 characters"},
		{`{"phone": "call me"}`, "phone", "may contain only digits, spaces and + - ( ) ."},
		{`{"date_of_birth": "10/12/1995"}`, "date_of_birth", "must be a date in the form YYYY-MM-DD"},
		{`{"date_of_birth": "2999-01-01"}`, "date_of_birth", "cannot be in the future"},
		{`{"date_of_birth": "1995-02-30"}`, "date_of_birth", "must be a date in the form YYYY-MM-DD"},
		{`{"first_name": null}`, "first_name", `may not be null; send "" to clear it`},
		{`{"first_name": 5}`, "first_name", "must be a string"},
		{`{"first_name": "a\u0000b"}`, "first_name", "must not contain control characters"},
		{`{"bio": "` + strings.Repeat("b", 5001) + `"}`, "bio", "must be at most 5000 characters"},
	}
	for _, tc := range tests {
		r := e.Do(t, http.MethodPatch, path, tc.body, bearer...)
		if r.Status != http.StatusBadRequest || r.Field(tc.field) != tc.msg {
			t.Errorf("%.60s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	// Several bad fields are reported together.
	r := e.Do(t, http.MethodPatch, path, `{"first_name": "`+strings.Repeat("a", 31)+`", "phone": "`+strings.Repeat("1", 21)+`"}`, bearer...)
	if r.Field("first_name") == "" || r.Field("phone") == "" {
		t.Errorf("two bad fields: %s", r.Raw)
	}
	for _, body := range []string{`{"email": "x@example.com"}`, `[]`, `{`, `{"is_staff": true}`} {
		if r := e.Do(t, http.MethodPatch, path, body, bearer...); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, r.Status, r.Raw)
		}
	}
	// Exactly at the limits is fine.
	r = e.Do(t, http.MethodPatch, path, map[string]string{"first_name": strings.Repeat("ж", 30), "phone": strings.Repeat("1", 20)}, bearer...)
	if r.Status != http.StatusOK {
		t.Errorf("at the limits: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodPatch, path, `{}`); r.Status != http.StatusUnauthorized {
		t.Errorf("no token: %d", r.Status)
	}
	if r := e.Do(t, http.MethodDelete, path, nil, bearer...); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", r.Status)
	}
}

// The append limit configured for serve (EVENTS__MAX_BYTES) reaches the
// profile command: a bio within the field's own limit but making an event
// over the bus limit is a 413, and nothing is stored.
func TestEventLimitReachesTheProfileCommand(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{MaxEventBytes: 4096})
	s := e.SignIn(t, authtest.Email("limit"))
	bearer := authtest.Bearer(s.Access)
	r := e.Do(t, http.MethodPatch, "/api/profile/", map[string]any{"bio": strings.Repeat("b", 4500)}, bearer...)
	if r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("bio over the event limit: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodPatch, "/api/profile/", map[string]any{"bio": "short"}, bearer...); r.Status != http.StatusOK {
		t.Fatalf("a short bio: %d %s", r.Status, r.Raw)
	}
}
