package main

import (
	"os"
	"time"

	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/api/profile"
	"github.com/cfgd/cfgd/commands/signin"
	"github.com/gorilla/mux"

	identityproj "github.com/cfgd/cfgd/projections/identity"
)

// identityModule is passwordless sign-in: the auth, profile and analytics
// endpoints over the sign-in core, and the identity projections. It
// returns the HTTP side too, whose middleware other modules protect their
// endpoints with.
func identityModule(w wiring) (module.Module, *auth.API, error) {
	app, err := signin.New(w.app.Signin, signin.Deps{
		Pool: w.deps.pg, Redis: w.deps.redis, Log: w.log, Console: os.Stdout, Now: time.Now,
	})
	if err != nil {
		return module.Module{}, nil, err
	}
	a := auth.New(app, w.app.AuthHTTP)
	return module.Module{
		Name: "identity",
		Routes: func(r *mux.Router) error {
			a.Mount(r)
			profile.Mount(r, a.RequireUser(), app.Users, app.UpdateProfile)
			analytics.Mount(r, a.Staff(), w.deps.pg, time.Now)
			return nil
		},
		Projections: identityproj.All(),
	}, a, nil
}
