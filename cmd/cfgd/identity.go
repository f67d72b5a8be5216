package main

import (
	"os"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/media"
	"github.com/cfgd/cfgd/api/profile"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/projections"
	identityproj "github.com/cfgd/cfgd/projections/identity"
)

// buildIdentity wires passwordless sign-in: the auth, profile and
// analytics endpoints, and the identity projections. It returns the staff
// middleware every admin endpoint uses.
func buildIdentity(w wiring) ([]*projections.Projection, mux.MiddlewareFunc, error) {
	a, err := auth.Build(w.app.Auth, auth.Deps{
		Pool: w.deps.pg, Redis: w.deps.redis, Log: w.log, Console: os.Stdout, Now: time.Now,
	})
	if err != nil {
		return nil, nil, err
	}
	a.Mount(w.router)
	store, err := media.Open(w.app.Pages.Media)
	if err != nil {
		return nil, nil, err
	}
	store.Mount(w.router)
	if err := profile.Mount(w.router, w.app.Pages.Profile, profile.Deps{
		RequireUser: a.RequireUser(), Reader: a.Users(), Updater: user.NewUpdateProfileHandler(w.deps.pg, time.Now),
		Avatars: user.NewChangeAvatarHandler(w.deps.pg, time.Now), Media: store,
	}); err != nil {
		return nil, nil, err
	}
	staff := a.Staff()
	analytics.Mount(w.router, staff, w.deps.pg, time.Now)
	return identityproj.All(), staff, nil
}
