// Package extensions holds the settings contract of cfgd's optional
// extensions (docs/settings.md, "App extensions") and mounts the routes of the enabled ones under
// /cfg/{name}/.
//
// There are two kinds. An app extension has the base settings of AppSettings
// and HTTP routes; it is on when its name is listed in EXTENSIONS__ENABLED and
// off otherwise, so it has no enabled field. A module extension has only
// ModuleSettings (enabled, default true) and no routes.
//
// The list of installed extensions and the middleware registry are built by
// the caller and passed in: this package keeps no registry of its own.
package extensions

import (
	"net/http"
)

// Kind tells an app extension from a module extension.
type Kind int

const (
	// App extensions have routes and the base settings of AppSettings.
	App Kind = iota
	// Module extensions have only an enabled switch and no routes.
	Module
)

func (k Kind) String() string {
	if k == Module {
		return "module"
	}
	return "app"
}

// Extension describes one installable extension. The caller builds the list
// (Builtin gives the four that ship with cfgd) and hands it to Load.
type Extension struct {
	// Name is the URL segment (/cfg/{name}/) and, upper-cased with '-' as
	// '_', the prefix of the extension's variables ({NAME}__URL_PREFIX).
	Name    string
	Version string
	Kind    Kind

	// Navigation, ConstanceFields and Schedules are the structured base
	// settings of an app extension. They are code, not configuration, so the
	// extension sets them here; they appear in its API root.
	Navigation      *Navigation
	ConstanceFields []ConstanceField
	Schedules       []Schedule

	// Settings reads the extension's own settings through v, which also
	// lists them in the settings table (Describe); problems stay in the
	// reader behind v.
	// It runs only for an enabled extension, so a required value of one that
	// is off never stops start-up. The result is shown, encoded with
	// encoding/json, by the API root and GET /cfg/extensions/: declare every
	// secret as a Secret so that it is masked. Nil means no own settings.
	Settings func(v Vars) any

	// Routes declares an app extension's route groups; own is what Settings
	// returned. Module extensions must leave it nil.
	Routes func(own any) []Group
}

// Names of the groups the spec's URL files map to; any other name is a custom
// group mounted at /cfg/{name}/{group}/.
const (
	MainGroup   = ""       // urls.py        → /cfg/{name}/
	AdminGroup  = "admin"  // urls_admin.py  → /cfg/{name}/admin/
	SystemGroup = "system" // urls_system.py → /cfg/{name}/system/
)

// Group is one of an extension's URL files.
type Group struct {
	Name   string // MainGroup, AdminGroup, SystemGroup or a custom path segment
	Routes []Route
}

// Route is one route of a group.
type Route struct {
	// Name is the route's name inside the extension's namespace; the router
	// knows it as "{namespace}:{name}" for the main group and
	// "{namespace}:{group}:{name}" for the others. Empty leaves it unnamed.
	Name string
	// Path is a gorilla/mux template relative to the group, without a leading
	// slash: "" is the group root, "tickets/{id}/" a sub-path.
	Path string
	// Methods restricts the route; empty allows every method.
	Methods []string
	Handler http.Handler
}

// AppSettings is the base of every app extension's settings
// (docs/settings.md, "App extensions").
type AppSettings struct {
	AdminEnabled      bool             `json:"admin_enabled"`
	MiddlewareClasses []string         `json:"middleware_classes"`
	Navigation        *Navigation      `json:"navigation"`
	ConstanceFields   []ConstanceField `json:"constance_fields"`
	Schedules         []Schedule       `json:"schedules"`
	// URLPrefix replaces {name} in /cfg/{name}/; empty means none.
	URLPrefix string `json:"-"`
	// URLNamespace names the routes; empty means none, and the routes are
	// then named after the extension.
	URLNamespace string `json:"-"`
}

// ModuleSettings is the base of every module extension's settings
// (docs/settings.md, "App extensions").
type ModuleSettings struct {
	Enabled bool `json:"enabled"`
}

// Navigation is an extension's section of the administration menu.
type Navigation struct {
	Title string    `json:"title"`
	Items []NavItem `json:"items"`
}

// NavItem is one entry of a navigation section.
type NavItem struct {
	Title string `json:"title"`
	// URL is where the entry leads, usually a path under the extension.
	URL string `json:"url"`
}

// ConstanceField is a setting that staff can change at run time.
type ConstanceField struct {
	Name    string `json:"name"`
	Default any    `json:"default"`
	Help    string `json:"help"`
}

// Schedule is a task the extension wants run periodically.
type Schedule struct {
	Name string `json:"name"`
	Cron string `json:"cron"` // five-field cron expression
	Task string `json:"task"`
}
