package extensions_test

import (
	"net/http"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest/extensions"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/deploy/config"
)

// The extensions list is staff-only with the real authenticator, not the
// fake the other tests use: a pass-through in its place must go red here.
func TestExtensionsListIsStaffOnlyWithTheRealAuthenticator(t *testing.T) {
	t.Parallel()
	e := authtest.Start(t, authtest.Options{})
	set, err := extensions.Load(config.NewReader(config.FromMaps(nil, nil)), extensions.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	e = e.WithRoutes(t, func(r *mux.Router) {
		staff := e.API.Staff()
		if err := set.Mount(r, map[string]mux.MiddlewareFunc{"staff": staff}, staff); err != nil {
			t.Fatal(err)
		}
	})
	admin := authtest.Email("ext-admin")
	e.Superuser(t, admin, "right-password")
	staff := e.SignIn(t, admin)
	plain := e.SignIn(t, authtest.Email("ext-user"))

	tests := []struct {
		name    string
		headers []string
		want    int
	}{
		{"anonymous", nil, http.StatusUnauthorized},
		{"non-staff", authtest.Bearer(plain.Access), http.StatusForbidden},
		{"staff", authtest.Bearer(staff.Access), http.StatusOK},
	}
	for _, tc := range tests {
		if r := e.Do(t, http.MethodGet, "/cfg/extensions/", nil, tc.headers...); r.Status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, r.Status, r.Raw, tc.want)
		}
	}
}
