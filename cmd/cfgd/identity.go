package main

import (
	"os"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/profile"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/projections"
	identityproj "github.com/cfgd/cfgd/projections/identity"
)

// buildIdentity wires passwordless sign-in: the auth, profile and
// analytics endpoints, and the identity projections. It returns the staff
// middleware every admin endpoint uses, and the sign-in API.
func buildIdentity(w wiring) ([]*projections.Projection, mux.MiddlewareFunc, *auth.API, error) {
	a, err := auth.Build(w.app.Auth, auth.Deps{
		Pool: w.deps.pg, Redis: w.deps.redis, Log: w.log, Console: os.Stdout, Now: time.Now,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	a.Mount(w.router)
	profile.Mount(w.router, a.RequireUser(), a.Users(), user.NewUpdateProfileHandler(w.deps.pg, time.Now))
	staff := a.Staff()
	analytics.Mount(w.router, staff, w.deps.pg, time.Now)
	return identityproj.All(), staff, a, nil
}
