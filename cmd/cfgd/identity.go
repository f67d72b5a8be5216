package main

import (
	"os"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"

	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/app/signin"
)

// identityModule is passwordless sign-in: the sign-in core and its HTTP
// side (api/identity). The HTTP side is returned too, for the middleware
// other modules protect their endpoints with.
func identityModule(w wiring) (modules.Module, *auth.API, error) {
	app, err := signin.New(w.app.Signin, signin.Deps{
		Pool: w.deps.pg, Events: w.deps.events, Redis: w.deps.redis, Log: w.log, Console: os.Stdout, Now: time.Now,
	})
	if err != nil {
		return modules.Module{}, nil, err
	}
	logGeneratedKeys(w.log, append(w.generatedKeys, app.Generated...))
	return modules.Identity(app, w.app.Identity, w.deps.pg, time.Now)
}
