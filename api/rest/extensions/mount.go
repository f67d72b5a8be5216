package extensions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// ListPath is where staff list the installed extensions.
const ListPath = "/cfg/extensions/"

// apiPath is the main-group path every app extension answers with its API root.
const apiPath = "api/"

// view is how an extension is shown by its API root and by ListPath; both
// use it, so masking cannot differ between them.
type view struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Kind     string          `json:"kind"`
	Enabled  bool            `json:"enabled"`
	Mount    *mountView      `json:"mount,omitempty"`
	Settings json.RawMessage `json:"settings"`
}

type mountView struct {
	Path      string            `json:"path"`
	API       string            `json:"api"`
	Namespace string            `json:"namespace"`
	Groups    map[string]string `json:"groups"` // groups other than the main one
}

// plan is one enabled app extension, checked and ready to mount.
type plan struct {
	e      *entry
	root   string
	mws    []mux.MiddlewareFunc
	routes []planned
	view   view
}

type planned struct {
	name    string
	path    string
	methods []string
	handler http.Handler
}

// Mount adds the routes of every enabled app extension to router, and
// GET /cfg/extensions/ wrapped in staff.
//
// middleware is the registry {NAME}__MIDDLEWARE_CLASSES picks from; the
// listed middleware wrap every route of that extension, the first listed
// outermost. Everything is checked before anything is added, so an error
// leaves router untouched. Call Mount once per router.
//
// A disabled extension is not mounted at all, so its paths get router's 404.
// An unknown path or a wrong method under an enabled extension gets router's
// NotFoundHandler or MethodNotAllowedHandler if the caller set one by the
// time requests are served, else a JSON 404 or 405.
func (s *Set) Mount(router *mux.Router, middleware map[string]mux.MiddlewareFunc, staff mux.MiddlewareFunc) error {
	if s.broken {
		return errors.New("extensions: the extension settings have problems (see the settings errors), not mounting")
	}
	if router == nil || staff == nil {
		return errors.New("extensions: Mount needs a router and a staff middleware")
	}
	var errs []error
	for _, p := range s.claims() {
		errs = append(errs, p)
	}
	var plans []*plan
	for _, e := range s.entries {
		if !e.mounted() {
			continue
		}
		p, err := planMount(e, middleware, router, staff)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plans = append(plans, p)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	views := make([]view, 0, len(s.entries))
	for _, e := range s.entries {
		v := baseView(e)
		for _, p := range plans {
			if p.e == e {
				v = p.view
			}
		}
		views = append(views, v)
	}
	list, err := json.Marshal(struct {
		Extensions []view `json:"extensions"`
		Count      int    `json:"count"`
	}{views, len(views)})
	if err != nil {
		return fmt.Errorf("extensions: encode list: %w", err)
	}

	for _, p := range plans {
		sub := router.PathPrefix(p.root).Subrouter()
		sub.Use(p.mws...)
		sub.NotFoundHandler = notFound(router)
		sub.MethodNotAllowedHandler = methodNotAllowed(router, nil)
		for _, rt := range p.routes {
			// A subrouter's templates continue its prefix's.
			route := sub.Handle(strings.TrimPrefix(rt.path, strings.TrimSuffix(p.root, "/")), rt.handler)
			if len(rt.methods) > 0 {
				route.Methods(rt.methods...)
			}
			if rt.name != "" {
				route.Name(rt.name)
			}
		}
	}
	router.Handle(ListPath, staff(rawJSON(list))).Methods(http.MethodGet, http.MethodHead).Name("extensions:list")
	router.Handle(ListPath, staff(methodNotAllowed(router, []string{http.MethodGet, http.MethodHead})))
	return nil
}

// Log writes one line per installed extension: whether it is on, where it is
// mounted and its settings, masked as in the API root.
func (s *Set) Log(ctx context.Context, logger *slog.Logger) {
	for _, e := range s.entries {
		attrs := []slog.Attr{
			slog.String("name", e.ext.Name),
			slog.String("version", e.ext.Version),
			slog.String("kind", e.ext.Kind.String()),
			slog.Bool("enabled", e.enabled),
		}
		if e.mounted() {
			attrs = append(attrs, slog.String("path", "/cfg/"+e.prefix()+"/"))
		}
		attrs = append(attrs, slog.String("settings", string(e.settings)))
		logger.LogAttrs(ctx, slog.LevelInfo, "extension", attrs...)
	}
}

func baseView(e *entry) view {
	return view{
		Name:     e.ext.Name,
		Version:  e.ext.Version,
		Kind:     e.ext.Kind.String(),
		Enabled:  e.enabled,
		Settings: e.settings,
	}
}

// planMount checks an enabled app extension's middleware and route groups.
func planMount(e *entry, registry map[string]mux.MiddlewareFunc, router *mux.Router, staff mux.MiddlewareFunc) (*plan, error) {
	var errs []error
	p := &plan{e: e, root: "/cfg/" + e.prefix() + "/"}

	for _, name := range e.app.MiddlewareClasses {
		mw, ok := registry[name]
		if !ok || mw == nil {
			errs = append(errs, config.Problem(e.env()+"__MIDDLEWARE_CLASSES", "expected middleware names from: "+registryNames(registry), name))
			continue
		}
		p.mws = append(p.mws, mw)
	}

	ns := e.namespace()
	p.view = baseView(e)
	p.view.Mount = &mountView{Path: p.root, API: p.root + apiPath, Namespace: ns, Groups: map[string]string{}}

	root := planned{name: ns + ":api-root", path: p.root + apiPath, methods: []string{http.MethodGet, http.MethodHead}}
	var groups []Group
	if e.ext.Routes != nil {
		groups = e.ext.Routes(e.own)
	}
	// Named groups go before the main group: gorilla/mux takes the first
	// route that matches, and a main-group template such as "{slug}/" would
	// otherwise swallow /admin/. The API root goes first of all.
	main := []planned{}
	named := []planned{}
	seenGroup := map[string]bool{}
	for _, g := range groups {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("extension %s: group %q: %s", e.ext.Name, g.Name, fmt.Sprintf(format, args...)))
		}
		if g.Name != MainGroup && (!validSegment(g.Name) || g.Name == strings.TrimSuffix(apiPath, "/")) {
			bad("a group name must be one path segment of a-z, 0-9, '-' and '_', and not api")
			continue
		}
		if seenGroup[g.Name] {
			bad("declared twice")
			continue
		}
		seenGroup[g.Name] = true
		if g.Name == AdminGroup && !e.app.AdminEnabled {
			continue
		}
		base := p.root
		if g.Name != MainGroup {
			base += g.Name + "/"
			p.view.Mount.Groups[g.Name] = base
		}
		for _, rt := range g.Routes {
			if rt.Handler == nil || strings.HasPrefix(rt.Path, "/") || strings.Contains(rt.Path, "//") {
				bad("route %q needs a handler and a path relative to the group", rt.Path)
				continue
			}
			pl := planned{path: base + rt.Path, methods: rt.Methods, handler: rt.Handler}
			if err := mux.NewRouter().Path(pl.path).GetError(); err != nil {
				bad("route %q: %v", rt.Path, err)
				continue
			}
			if rt.Name != "" {
				pl.name = ns + ":" + rt.Name
				if g.Name != MainGroup {
					pl.name = ns + ":" + g.Name + ":" + rt.Name
				}
			}
			if g.Name == MainGroup {
				main = append(main, pl)
			} else {
				named = append(named, pl)
			}
		}
	}

	all := append(append([]planned{root}, named...), main...)
	if err := checkOverlaps(e.ext.Name, all); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// The API root is built last, once the view holds every group.
	body, err := json.Marshal(p.view)
	if err != nil {
		return nil, fmt.Errorf("extension %s: encode API root: %w", e.ext.Name, err)
	}
	pub := p.view
	if pub.Settings, err = publicSettings(e); err != nil {
		return nil, fmt.Errorf("extension %s: %w", e.ext.Name, err)
	}
	public, err := json.Marshal(pub)
	if err != nil {
		return nil, fmt.Errorf("extension %s: encode API root: %w", e.ext.Name, err)
	}
	all[0].handler = staffOr(staff, rawJSON(body), rawJSON(public))
	p.routes = append(all, methodFallbacks(all, router)...)
	return p, nil
}

// methodFallbacks adds, after the real routes, one route per path that only
// some methods may use, answering 405 to the others. gorilla/mux v1.8.1 loses
// a method mismatch as soon as a later route of the same subrouter matches
// the prefix, and answers 404 instead.
func methodFallbacks(routes []planned, router *mux.Router) []planned {
	allow := map[string][]string{}
	var order []string
	anyMethod := map[string]bool{}
	for _, rt := range routes {
		if len(rt.methods) == 0 {
			anyMethod[rt.path] = true
			continue
		}
		if _, ok := allow[rt.path]; !ok {
			order = append(order, rt.path)
		}
		for _, m := range rt.methods {
			if m = strings.ToUpper(m); !slices.Contains(allow[rt.path], m) {
				allow[rt.path] = append(allow[rt.path], m)
			}
		}
	}
	var out []planned
	for _, path := range order {
		if !anyMethod[path] {
			out = append(out, planned{path: path, handler: methodNotAllowed(router, allow[path])})
		}
	}
	return out
}

// checkOverlaps rejects two routes of one extension that share a name, or a
// path and a method, since mux would silently serve only the first.
func checkOverlaps(ext string, routes []planned) error {
	var errs []error
	names := map[string]bool{}
	byPath := map[string][][]string{}
	for _, rt := range routes {
		if rt.name != "" {
			if names[rt.name] {
				errs = append(errs, fmt.Errorf("extension %s: route name %q used twice", ext, rt.name))
			}
			names[rt.name] = true
		}
		for _, other := range byPath[rt.path] {
			if len(other) == 0 || len(rt.methods) == 0 || slices.ContainsFunc(rt.methods, func(m string) bool {
				return slices.ContainsFunc(other, func(o string) bool { return strings.EqualFold(o, m) })
			}) {
				errs = append(errs, fmt.Errorf("extension %s: two routes serve %s with the same method", ext, rt.path))
				break
			}
		}
		byPath[rt.path] = append(byPath[rt.path], rt.methods)
	}
	return errors.Join(errs...)
}

func registryNames(registry map[string]mux.MiddlewareFunc) string {
	names := make([]string, 0, len(registry))
	for n, mw := range registry {
		if mw != nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "(none registered)"
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// rawJSON serves a body encoded once at start-up: the settings never change
// while the process runs.
// staffOr serves staff callers with full and anyone else with public: the
// staff middleware is asked, its refusal thrown away.
func staffOr(staff mux.MiddlewareFunc, full, public http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var isStaff bool
		var passed *http.Request
		staff(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { isStaff, passed = true, r })).ServeHTTP(discard{}, r)
		if isStaff {
			full.ServeHTTP(w, passed)
			return
		}
		public.ServeHTTP(w, r)
	})
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func rawJSON(body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		_, _ = w.Write([]byte("\n"))
	})
}

// notFound defers to the caller's handler when it has one, read per request
// because the caller may set it after Mount.
func notFound(router *mux.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := router.NotFoundHandler; h != nil {
			h.ServeHTTP(w, r)
			return
		}
		rest.WriteError(w, errcode.New(errcode.NotFound, "not found"))
	})
}

// methodNotAllowed is notFound for a wrong method; allow is known for the
// fallback routes and nil when mux itself found the mismatch.
func methodNotAllowed(router *mux.Router, allow []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
		}
		if h := router.MethodNotAllowedHandler; h != nil {
			h.ServeHTTP(w, r)
			return
		}
		rest.WriteError(w, errcode.New(errcode.MethodNotAllowed, "method not allowed"))
	})
}
