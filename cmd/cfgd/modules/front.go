package modules

import (
	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/pages"
)

// Front is the front door as a module: the shared static assets (every
// page for people links into them), the index, the schema and the docs
// page. admin lists the staff pages other modules mount, for the index.
func Front(cfg pages.FrontConfig, assets *pages.Assets, admin ...pages.Link) Module {
	return Module{Name: "front", Routes: func(r *mux.Router) error {
		assets.Mount(r)
		return pages.MountFront(r, cfg, assets, admin...)
	}}
}
