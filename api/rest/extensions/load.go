package extensions

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// EnabledVar lists the app extensions to turn on, comma-separated.
const EnabledVar = "EXTENSIONS__ENABLED"

// maxSegment bounds a URL prefix or namespace; longer is a typo, not a need.
const maxSegment = 64

// Set is the installed extensions with the settings read at start-up. It does
// not change after Load, so its handlers need no locking.
type Set struct {
	entries []*entry
	// broken is set when Load left problems in the reader: such a Set is fit
	// for reporting, not for mounting.
	broken bool
}

type entry struct {
	ext      Extension
	enabled  bool
	app      AppSettings    // app extensions that are on
	module   ModuleSettings // module extensions
	own      any            // what ext.Settings returned; nil when off
	settings json.RawMessage
}

func (e *entry) env() string { return envPrefix(e.ext.Name) }

// prefix is the effective URL segment: url_prefix replaces {name}.
func (e *entry) prefix() string {
	if e.app.URLPrefix != "" {
		return e.app.URLPrefix
	}
	return e.ext.Name
}

// namespace is the effective route namespace: url_namespace, else the name,
// so that two extensions' route names never meet.
func (e *entry) namespace() string {
	if e.app.URLNamespace != "" {
		return e.app.URLNamespace
	}
	return e.ext.Name
}

func (e *entry) mounted() bool { return e.enabled && e.ext.Kind == App }

func envPrefix(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Load reads which extensions are on and the settings of those that are.
//
// Problems with the settings (an unknown name in EXTENSIONS__ENABLED, a
// missing or malformed value, a clashing url_prefix) are left in r, one line
// per variable, so the caller reports them together with its own through
// r.Err(); a Set read with problems refuses to Mount. The error returned is
// for a faulty installed list, which is a bug in the caller, not bad input.
func Load(r *config.Reader, installed []Extension) (*Set, error) {
	if err := checkInstalled(installed); err != nil {
		return nil, err
	}
	before := countProblems(r)
	on := enabledApps(r, installed)

	s := &Set{}
	for _, ext := range installed {
		e := &entry{ext: ext}
		switch ext.Kind {
		case App:
			e.enabled = on[ext.Name]
			if e.enabled {
				e.app = readApp(ReadFrom(r), ext, e.env())
			}
		case Module:
			e.module.Enabled = readModule(ReadFrom(r), ext.Name, e.env())
			e.enabled = e.module.Enabled
		}
		if e.enabled && ext.Settings != nil {
			e.own = ext.Settings(ReadFrom(r))
		}
		raw, err := settingsJSON(e)
		if err != nil {
			return nil, fmt.Errorf("extension %s: %w", ext.Name, err)
		}
		e.settings = raw
		s.entries = append(s.entries, e)
	}
	for _, p := range s.claims() {
		r.Record(p)
	}
	s.broken = countProblems(r) > before
	return s, nil
}

// Enabled tells whether the named extension is installed and on.
func (s *Set) Enabled(name string) bool {
	e := s.find(name)
	return e != nil && e.enabled
}

// Settings returns the own settings of an enabled extension, as its Settings
// function returned them (Payments, Leads, Support or Newsletter for the
// built-in ones).
func (s *Set) Settings(name string) (any, bool) {
	e := s.find(name)
	if e == nil || !e.enabled {
		return nil, false
	}
	return e.own, true
}

func (s *Set) find(name string) *entry {
	for _, e := range s.entries {
		if e.ext.Name == name {
			return e
		}
	}
	return nil
}

func countProblems(r *config.Reader) int {
	err := r.Err()
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

// checkInstalled rejects an installed list that the caller got wrong.
func checkInstalled(installed []Extension) error {
	var errs []error
	names := map[string]bool{}
	envs := map[string]string{}
	for i, ext := range installed {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("installed extension %d (%q): %s", i, ext.Name, fmt.Sprintf(format, args...)))
		}
		if !validSegment(ext.Name) {
			bad("name must be one path segment of a-z, 0-9, '-' and '_'")
		}
		if names[ext.Name] {
			bad("installed twice")
		}
		names[ext.Name] = true
		if other, ok := envs[envPrefix(ext.Name)]; ok && other != ext.Name {
			bad("its variables would share the prefix %s__ with extension %q", envPrefix(ext.Name), other)
		}
		envs[envPrefix(ext.Name)] = ext.Name
		switch ext.Kind {
		case App:
		case Module:
			if ext.Routes != nil {
				bad("a module extension has no routes")
			}
			if ext.Navigation != nil || len(ext.ConstanceFields) > 0 || len(ext.Schedules) > 0 {
				bad("a module extension has only the enabled setting")
			}
		default:
			bad("unknown kind %d", ext.Kind)
		}
		if ext.Navigation != nil && ext.Navigation.Title == "" {
			bad("navigation needs a title")
		}
		fields := map[string]bool{}
		for _, f := range ext.ConstanceFields {
			if f.Name == "" || fields[f.Name] {
				bad("constance field names must be set and distinct, got %q", f.Name)
			}
			fields[f.Name] = true
		}
		for _, sc := range ext.Schedules {
			if sc.Name == "" || sc.Task == "" || len(strings.Fields(sc.Cron)) != 5 {
				bad("schedule %q needs a name, a task and a five-field cron expression", sc.Name)
			}
		}
	}
	return errors.Join(errs...)
}

// enabledApps reads EXTENSIONS__ENABLED.
func enabledApps(r *config.Reader, installed []Extension) map[string]bool {
	kinds := map[string]Kind{}
	var apps []string
	for _, ext := range installed {
		kinds[ext.Name] = ext.Kind
		if ext.Kind == App {
			apps = append(apps, ext.Name)
		}
	}
	known := "none installed"
	if len(apps) > 0 {
		known = strings.Join(apps, ", ")
	}
	on := map[string]bool{}
	for _, name := range r.List(EnabledVar, nil) {
		key := strings.ToLower(name)
		kind, ok := kinds[key]
		switch {
		case !ok:
			r.Fail(EnabledVar, "expected a comma-separated list of app extensions from: "+known, name)
		case kind == Module:
			r.Fail(EnabledVar, "expected app extensions only; module extension "+key+" is turned on or off with "+envPrefix(key)+"__ENABLED", name)
		default:
			on[key] = true
		}
	}
	return on
}

func readApp(v Vars, ext Extension, env string) AppSettings {
	name := ext.Name
	return AppSettings{
		AdminEnabled:      v.Bool(env+"__ADMIN_ENABLED", true, name+": show it in the administration interface; `false` also leaves its `admin` route group unmounted"),
		MiddlewareClasses: readMiddleware(v, env+"__MIDDLEWARE_CLASSES", name),
		Navigation:        ext.Navigation,
		ConstanceFields:   slices.Clone(ext.ConstanceFields),
		Schedules:         slices.Clone(ext.Schedules),
		URLPrefix:         readSegment(v, env+"__URL_PREFIX", name+": replaces `"+name+"` in `/cfg/"+name+"/` (one path segment)"),
		URLNamespace:      readSegment(v, env+"__URL_NAMESPACE", name+": names its routes `{namespace}:{route}` instead of `"+name+":`"),
	}
}

func readModule(v Vars, name, env string) bool {
	return v.Bool(env+"__ENABLED", true, name+" (module extension): on or off")
}

// readMiddleware reads the middleware names; whether each exists is known
// only to Mount, which has the registry.
func readMiddleware(v Vars, name, ext string) []string {
	list := v.List(name, ext+": comma-separated middleware, by name, around every route of the extension; the first is the outermost")
	seen := map[string]bool{}
	out := make([]string, 0, len(list))
	for _, m := range list {
		if seen[m] {
			v.fail(name, "expected each middleware once", m)
			continue
		}
		seen[m] = true
		out = append(out, m)
	}
	return out
}

// readSegment reads an optional url_prefix or url_namespace. A bad value is
// reported and dropped, so that it does not also show up as a collision.
func readSegment(v Vars, name, help string) string {
	s := v.String(name, "", help)
	if s != "" && !validSegment(s) {
		v.fail(name, fmt.Sprintf("expected one path segment of a-z, 0-9, '-' and '_', at most %d characters", maxSegment), s)
		return ""
	}
	return s
}

// validSegment tells whether s is one URL path segment of [a-z0-9-_].
func validSegment(s string) bool {
	if s == "" || len(s) > maxSegment {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// reservedPrefix names the /cfg/ segments cfgd keeps for itself.
func reservedPrefix(p string) bool { return p == "extensions" || p == "grpc" }

// claims finds enabled app extensions that would share a URL prefix or a
// namespace, or take one cfgd reserves. Extensions mounted under their own
// name claim first, so a clash is blamed on the url_prefix that caused it.
func (s *Set) claims() []*errcode.Error {
	var errs []*errcode.Error
	type claim struct {
		taken  map[string]string
		value  func(*entry) string
		set    func(*entry) bool
		suffix string
		what   string
	}
	for _, c := range []claim{
		{map[string]string{}, (*entry).prefix, func(e *entry) bool { return e.app.URLPrefix != "" }, "__URL_PREFIX", "URL prefix"},
		{map[string]string{}, (*entry).namespace, func(e *entry) bool { return e.app.URLNamespace != "" }, "__URL_NAMESPACE", "URL namespace"},
	} {
		for _, overridden := range []bool{false, true} {
			for _, e := range s.entries {
				if !e.mounted() || c.set(e) != overridden {
					continue
				}
				v := c.value(e)
				var want string
				if other, ok := c.taken[v]; ok {
					want = fmt.Sprintf("expected a %s no other extension uses (%s uses it)", c.what, other)
				} else if c.what == "URL prefix" && reservedPrefix(v) {
					want = fmt.Sprintf("expected a URL prefix other than /cfg/%s/, which cfgd keeps for itself", v)
				} else {
					c.taken[v] = e.ext.Name
					continue
				}
				errs = append(errs, config.Problem(e.env()+c.suffix, want, v))
			}
		}
	}
	return errs
}

// appView is AppSettings as shown to operators: optional values as null and
// lists as [] rather than null.
type appView struct {
	AdminEnabled      bool             `json:"admin_enabled"`
	MiddlewareClasses []string         `json:"middleware_classes"`
	Navigation        *Navigation      `json:"navigation"`
	ConstanceFields   []ConstanceField `json:"constance_fields"`
	Schedules         []Schedule       `json:"schedules"`
	URLPrefix         *string          `json:"url_prefix"`
	URLNamespace      *string          `json:"url_namespace"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// settingsJSON flattens the base and own settings into one object, as the
// spec's settings classes inherit their base fields. An app extension that is
// off has no settings: it is off because nobody configured it.
func settingsJSON(e *entry) (json.RawMessage, error) {
	var base any
	switch {
	case e.ext.Kind == Module:
		base = e.module
	case e.enabled:
		base = appView{
			AdminEnabled:      e.app.AdminEnabled,
			MiddlewareClasses: orEmpty(e.app.MiddlewareClasses),
			Navigation:        e.app.Navigation,
			ConstanceFields:   orEmpty(e.app.ConstanceFields),
			Schedules:         orEmpty(e.app.Schedules),
			URLPrefix:         optional(e.app.URLPrefix),
			URLNamespace:      optional(e.app.URLNamespace),
		}
	default:
		return json.RawMessage("null"), nil
	}
	fields := map[string]json.RawMessage{}
	if err := mergeObject(fields, base, false); err != nil {
		return nil, err
	}
	if e.own != nil {
		if err := mergeObject(fields, e.own, true); err != nil {
			return nil, err
		}
	}
	return json.Marshal(fields)
}

// publicSettings is e's settings as a caller who is not staff sees them
// in the API root: without the extension's own secrets (even masked: that
// tells whether one is set) and without any own setting holding an e-mail
// address (or any other text with an '@', such as a URL with a login).
func publicSettings(e *entry) (json.RawMessage, error) {
	if e.own == nil {
		return e.settings, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e.settings, &fields); err != nil || fields == nil {
		return e.settings, nil
	}
	v := reflect.Indirect(reflect.ValueOf(e.own))
	if v.Kind() != reflect.Struct {
		return e.settings, nil
	}
	secret := reflect.TypeFor[config.Secret]()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		fv := v.Field(i)
		if f.Type == secret || (fv.Kind() == reflect.String && strings.Contains(fv.String(), "@")) {
			delete(fields, name)
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode public settings: %w", err)
	}
	return b, nil
}

func mergeObject(into map[string]json.RawMessage, v any, own bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode settings: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return errors.New("settings must encode as a JSON object")
	}
	for k, raw := range m {
		if _, dup := into[k]; dup && own {
			return fmt.Errorf("own setting %q hides a base setting", k)
		}
		into[k] = raw
	}
	return nil
}
