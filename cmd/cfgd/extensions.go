package main

import (
	"context"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest/auth"
)

// extensionsModule mounts the enabled app extensions under /cfg/{name}/
// and the staff-only list at /cfg/extensions/. The staff middleware is
// also the one {NAME}__MIDDLEWARE_CLASSES can pick.
func extensionsModule(ctx context.Context, w wiring, a *auth.API) (modules.Module, error) {
	w.app.Extensions.Log(ctx, w.log)
	staff := a.Staff()
	return modules.Module{Name: "extensions", Routes: func(r *mux.Router) error {
		return w.app.Extensions.Mount(r, map[string]mux.MiddlewareFunc{"staff": staff}, staff)
	}}, nil
}
