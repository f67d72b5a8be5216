package main

import (
	"context"

	"github.com/gorilla/mux"
)

// mountExtensions mounts the enabled app extensions under /cfg/{name}/ and
// the staff-only list at /cfg/extensions/. middleware is the registry that
// {NAME}__MIDDLEWARE_CLASSES picks from.
func mountExtensions(ctx context.Context, w wiring, staff mux.MiddlewareFunc, middleware map[string]mux.MiddlewareFunc) error {
	w.app.Extensions.Log(ctx, w.log)
	return w.app.Extensions.Mount(w.router, middleware, staff)
}
