package auth_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
)

func TestSignInFlowAndProfileReadYourWrites(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	email := authtest.Email("Flow")
	code := e.RequestCode(t, strings.ToUpper(email))

	m, _ := e.Mail.Last(email)
	if m.Subject != "Your verification code" || !strings.Contains(m.Text, code) || !strings.Contains(m.HTML, code) ||
		!strings.Contains(m.Text, "5 minutes") || !strings.Contains(m.HTML, "5 minutes") || m.From != "no-reply@cfgd.test" {
		t.Fatalf("e-mail: %+v", m)
	}

	r := e.Verify(t, email, code)
	if r.Status != http.StatusOK || r.Body["success"] != true {
		t.Fatalf("verify: %d %s", r.Status, r.Raw)
	}
	u := r.Obj("user")
	if u["email"] != email || u["id"].(float64) < 1 || u["first_name"] != "" || u["last_name"] != "" {
		t.Fatalf("user: %v", u)
	}
	access := r.Obj("tokens")["access"].(string)
	// The very first call after the verify sees the profile.
	p := e.Do(t, http.MethodGet, "/api/profile/", nil, authtest.Bearer(access)...)
	if p.Status != http.StatusOK {
		t.Fatalf("profile: %d %s", p.Status, p.Raw)
	}
	if p.Obj("user")["email"] != email || p.Obj("user")["last_login"] == nil || p.Obj("profile")["bio"] != "" {
		t.Fatalf("profile: %s", p.Raw)
	}
}
