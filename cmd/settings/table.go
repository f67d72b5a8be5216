package settings

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/api/rest/extensions"
	"github.com/cfgd/cfgd/deploy/config"
)

// Setting is one variable as a user sees it: its name, its default as it
// would be written in the environment ("" means unset) and what it does.
// Table lists them; docs/settings.md shows the same table (a test holds
// the two together).
type Setting struct {
	Name    string
	Default string
	Help    string
	// Secret values are never shown: Current masks them.
	Secret bool
}

// Value is a Setting with the value it has now, as Current reads it.
type Value struct {
	Setting
	// Value as it would be written in the environment; a set secret is
	// config.Masked, a URL's password config.RedactMask.
	Value string
	// Set tells whether the variable was given (environment or .env).
	Set bool
}

// Section is a group of settings under one heading of docs/settings.md.
type Section struct {
	Title    string
	Settings []Setting
}

// field binds a Setting to the place its value goes. The Setting's name
// and help are written once, in the field's constructor call; its default
// is whatever the target holds when the field is built, which is the
// owning package's DefaultConfig(), so no default is written twice.
type field struct {
	Setting
	read func(r *config.Reader)
	show func() string
}

func newField(name, help string, show func() string, read func(r *config.Reader)) field {
	return field{Setting: Setting{Name: name, Default: show(), Help: help}, read: read, show: show}
}

// readAll reads every field into its target, in order, so problems are
// reported in the order of the table.
func readAll(r *config.Reader, fs []field) {
	for _, f := range fs {
		f.read(r)
	}
}

func str(p *string, name, help string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) { *p = r.String(name, *p) })
}

func hostPort(p *string, name, help string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) { *p = r.HostPort(name, *p) })
}

// optHostPort is a host:port that may stay unset.
func optHostPort(p *string, name, help string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) {
		if r.Has(name) {
			*p = r.HostPort(name, *p)
		}
	})
}

func urlOf(p *string, name, help string, schemes ...string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) { *p = r.URL(name, *p, schemes...) })
}

func email(p *string, name, help string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) { *p = r.Email(name, *p, false) })
}

func oneOf(p *string, name, help string, allowed ...string) field {
	return newField(name, help, func() string { return *p }, func(r *config.Reader) { *p = r.OneOf(name, *p, allowed...) })
}

func intRange(p *int, name, help string, lo, hi int) field {
	return newField(name, help, func() string { return strconv.Itoa(*p) }, func(r *config.Reader) { *p = r.IntRange(name, *p, lo, hi) })
}

func int64Range(p *int64, name, help string, lo, hi int) field {
	return newField(name, help, func() string { return strconv.FormatInt(*p, 10) },
		func(r *config.Reader) { *p = int64(r.IntRange(name, int(*p), lo, hi)) })
}

// mebibytes reads a byte count written in MiB.
func mebibytes(p *int64, name, help string, lo, hi int) field {
	return newField(name, help, func() string { return strconv.FormatInt(*p>>20, 10) },
		func(r *config.Reader) { *p = int64(r.IntRange(name, int(*p>>20), lo, hi)) << 20 })
}

func boolean(p *bool, name, help string) field {
	return newField(name, help, func() string { return strconv.FormatBool(*p) }, func(r *config.Reader) { *p = r.Bool(name, *p) })
}

// duration accepts zero; positive does not.
func duration(p *time.Duration, name, help string) field {
	return newField(name, help, func() string { return formatDuration(*p) }, func(r *config.Reader) { *p = r.Duration(name, *p) })
}

func positive(p *time.Duration, name, help string) field {
	return newField(name, help, func() string { return formatDuration(*p) }, func(r *config.Reader) { *p = r.PositiveDuration(name, *p) })
}

func list(p *[]string, name, help string) field {
	return newField(name, help, func() string { return strings.Join(*p, ",") }, func(r *config.Reader) { *p = r.List(name, *p) })
}

func secret(p *config.Secret, name, help string) field {
	f := newField(name, help, func() string { return p.String() }, func(r *config.Reader) {
		if v := r.Secret(name, false); v != "" {
			*p = config.NewSecret(v)
		}
	})
	f.Secret = true
	return f
}

// formatDuration writes d as a user would: 15m, 168h, 500ms, 1h30m.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// sections builds every field over the defaults, in the order of
// docs/settings.md. The targets are thrown away: only the Settings are used.
func sections() []struct {
	title  string
	fields []field
} {
	core := DefaultCore()
	sg := newSigninTarget()
	id := newIdentityTarget()
	tk := newTasksTarget("")
	rl := newRequestLogTarget()
	gl := newGRPCTarget()
	return []struct {
		title  string
		fields []field
	}{
		{"Core", coreFields(&core)},
		{"Sign-in", sg.fields()},
		{"Media and profile", id.fields()},
		{"Task queues", tk.fields()},
		{"Request log", rl.fields()},
		{"gRPC server", grpcFields(gl)},
	}
}

// Table lists every setting cmd/settings reads, with its default and help,
// grouped as docs/settings.md shows them. `cfgd config` and --help read it.
// The app extensions' variables come last, from extensions.Describe.
func Table() []Section {
	var out []Section
	for _, s := range sections() {
		sec := Section{Title: s.title}
		for _, f := range s.fields {
			sec.Settings = append(sec.Settings, f.Setting)
		}
		out = append(out, sec)
	}
	return append(out, Section{Title: "App extensions", Settings: extensionSettings()})
}

// extensionSettings lists the built-in extensions' variables as each
// extension declares them where it reads them (extensions.Vars).
func extensionSettings() []Setting {
	var out []Setting
	for _, v := range extensions.Describe(extensions.Builtin()) {
		out = append(out, Setting{Name: v.Name, Default: v.Default, Help: v.Help, Secret: v.Secret})
	}
	return out
}

// Current reads every setting of Table from r and returns each with the
// value it has, secrets masked, and the password of every URL or
// connection string masked (config.Redact). Problems are left in r.
func Current(r *config.Reader) []Value {
	core := DefaultCore()
	sg, id, rl := newSigninTarget(), newIdentityTarget(), newRequestLogTarget()
	var out []Value
	add := func(fs []field) {
		readAll(r, fs)
		for _, f := range fs {
			out = append(out, Value{Setting: f.Setting, Value: config.Redact(f.show()), Set: r.Has(f.Name)})
		}
	}
	add(coreFields(&core))
	tk := newTasksTarget(core.RedisURL)
	add(sg.fields())
	add(id.fields())
	add(tk.fields())
	add(rl.fields())
	add(grpcFields(newGRPCTarget()))
	// An extension's variables are checked by extensions.Load, and only
	// for an extension that is on: here they are shown as given.
	for _, st := range extensionSettings() {
		v := Value{Setting: st, Value: config.Redact(r.String(st.Name, st.Default)), Set: r.Has(st.Name)}
		if st.Secret && v.Value != "" {
			v.Value = config.Masked
		}
		out = append(out, v)
	}
	return out
}

// Markdown renders the tables of docs/settings.md.
func Markdown() string {
	var b strings.Builder
	for _, s := range Table() {
		fmt.Fprintf(&b, "\n### %s\n\n| variable | default | meaning |\n|---|---|---|\n", s.Title)
		for _, v := range s.Settings {
			def := "empty"
			if v.Default != "" {
				def = "`" + v.Default + "`"
			}
			if v.Secret {
				def += " (secret)"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, strings.ReplaceAll(v.Help, "|", `\|`))
		}
	}
	b.WriteString("\n")
	return b.String()
}
