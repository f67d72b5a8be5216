package analytics_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections/projectors"
)

const (
	fbURL = "https://example.com/landing?utm_source=facebook&utm_campaign=spring"
)

func TestSourcesAreLinkedOnlyForNewUsersAndRanked(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{Config: func(c *signin.Config) {
		c.DashboardHosts, c.RegistrationPaths = []string{"dash.example.com"}, []string{"/register/", "/join"}
	}})
	admin := authtest.Email("analyst")
	e.Superuser(t, admin, "analyst-password")
	auth := basic(admin, "analyst-password")

	var users []int64
	signIn := func(email string, requestSource, verifySource string) authtest.Session {
		t.Helper()
		var extra []string
		if requestSource != "" {
			extra = []string{"source_url", requestSource}
		}
		code := e.RequestCode(t, email, extra...)
		var vextra []string
		if verifySource != "" {
			vextra = []string{"source_url", verifySource}
		}
		r := e.Verify(t, email, code, vextra...)
		if r.Status != http.StatusOK {
			t.Fatalf("verify %s: %d %s", email, r.Status, r.Raw)
		}
		id := int64(r.Obj("user")["id"].(float64))
		users = append(users, id)
		return authtest.Session{UserID: id}
	}
	returning := authtest.Email("returning")
	signIn(returning, fbURL, "")                                                 // remembered from the request
	signIn(authtest.Email("fb2"), "", fbURL)                                     // given on the verify
	signIn(authtest.Email("dash"), "", "https://DASH.example.com:8443/home")     // dashboard host
	signIn(authtest.Email("site"), "https://other.example/ignored", "/register") // verify overrides request
	signIn(authtest.Email("join"), "", "https://www.example.com/join/?ref=x")    // registration path
	signIn(authtest.Email("partner"), "", "https://blog.partner.org/post/1")     // anything else: the host
	signIn(authtest.Email("nosource"), "", "")                                   // no source: no link
	signIn(returning, "", "https://never-linked.example/")                       // existing user: no new link
	for _, id := range users {
		e.WaitProjected(t, projectors.UsersName, identity.UserStream(id))
	}

	r := e.Do(t, http.MethodGet, "/api/analytics/sources/top/", nil, auth...)
	if r.Status != http.StatusOK {
		t.Fatalf("top: %d %s", r.Status, r.Raw)
	}
	type row = map[string]any
	got := r.Body["sources"].([]any)
	want := []struct {
		url, name string
		users     float64
	}{
		{fbURL, "Facebook - Spring Campaign", 2},
		{"https://DASH.example.com:8443/home", "Dashboard", 1},
		{"/register", "Website Registration", 1},
		{"https://www.example.com/join/?ref=x", "Website Registration", 1},
		{"https://blog.partner.org/post/1", "blog.partner.org", 1},
	}
	if len(got) != len(want) || r.Body["count"].(float64) != float64(len(want)) {
		t.Fatalf("top sources: %s", r.Raw)
	}
	// The leader is certain; the ties below it come in the order the
	// projection created the sources, which follows Kafka partitions.
	wanted := map[string]string{}
	for _, w := range want {
		wanted[fmt.Sprintf("%s|%s|%v", w.url, w.name, w.users)] = w.url
	}
	for i, g := range got {
		g := g.(row)
		key := fmt.Sprintf("%s|%s|%v", g["url"], g["name"], g["users"])
		if _, ok := wanted[key]; !ok || (i == 0 && g["url"] != fbURL) {
			t.Errorf("rank %d: unexpected %v", i+1, g)
		}
		delete(wanted, key)
	}
	r = e.Do(t, http.MethodGet, "/api/analytics/sources/links/", nil, auth...)
	if r.Status != http.StatusOK || r.Body["days"].(float64) != 30 || r.Body["total"].(float64) != 6 {
		t.Fatalf("links (default 30 days): %d %s", r.Status, r.Raw)
	}
	first := r.Body["sources"].([]any)[0].(row)
	if first["url"] != fbURL || first["links"].(float64) != 2 {
		t.Fatalf("links: %s", r.Raw)
	}
	// Thirty-one days later the window is empty, a wider one is not.
	e.Clock.Advance(31 * 24 * time.Hour)
	if r := e.Do(t, http.MethodGet, "/api/analytics/sources/links/?days=30", nil, auth...); r.Body["total"].(float64) != 0 || len(r.Body["sources"].([]any)) != 0 {
		t.Fatalf("links 31 days later: %s", r.Raw)
	}
	if r := e.Do(t, http.MethodGet, "/api/analytics/sources/links/?days=60", nil, auth...); r.Body["total"].(float64) != 6 {
		t.Fatalf("links over 60 days: %s", r.Raw)
	}
	for _, bad := range []string{"0", "-1", "x", "3651", "1.5"} {
		r := e.Do(t, http.MethodGet, "/api/analytics/sources/links/?days="+bad, nil, auth...)
		if r.Status != http.StatusBadRequest || r.Field("days") == "" {
			t.Errorf("days=%s: %d %s", bad, r.Status, r.Raw)
		}
	}
	// A query that does not decode is refused, not read as the default window.
	for _, bad := range []string{"days=%zz", "days=7&x=%zz", "days=7;x=1"} {
		r := e.Do(t, http.MethodGet, "/api/analytics/sources/links/?"+bad, nil, auth...)
		if r.Status != http.StatusBadRequest || r.Body["success"] != false || r.Str("code") != "bad_request" {
			t.Errorf("%s: %d %s", bad, r.Status, r.Raw)
		}
	}
}

func basic(email, password string) []string {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(email, password)
	return []string{"Authorization", req.Header.Get("Authorization")}
}
