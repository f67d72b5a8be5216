package extensions

import (
	"strconv"
	"strings"

	"github.com/cfgd/cfgd/deploy/config"
)

// Var is one variable an extension reads, as the settings table shows it.
type Var struct {
	Name    string
	Default string // as written in the environment; "" is unset
	Help    string
	Secret  bool
}

// Vars reads an extension's variables and, in the same call, describes them:
// each variable's name, default and help are written once, where it is read,
// and Describe lists them for `cfgd config`, --help and docs/settings.md.
// A Vars that only describes (from Describe) reads nothing and returns the
// defaults.
type Vars struct {
	r    *config.Reader
	seen *[]Var
}

// ReadFrom is a Vars that reads from r; problems are left in r.
func ReadFrom(r *config.Reader) Vars { return Vars{r: r} }

func (v Vars) note(name, def, help string, secret bool) {
	if v.seen != nil {
		*v.seen = append(*v.seen, Var{Name: name, Default: def, Help: help, Secret: secret})
	}
}

// String reads an optional text.
func (v Vars) String(name, def, help string) string {
	v.note(name, def, help, false)
	if v.r == nil {
		return def
	}
	return v.r.String(name, def)
}

// Required reads a text that must be set; want says what is expected.
func (v Vars) Required(name, want, help string) string {
	v.note(name, "", help+" (required)", false)
	if v.r == nil {
		return ""
	}
	return v.r.Required(name, want)
}

// Secret reads a secret, masked wherever it is shown.
func (v Vars) Secret(name string, required bool, help string) config.Secret {
	if required {
		help += " (required)"
	}
	v.note(name, "", help, true)
	if v.r == nil {
		return config.Secret{}
	}
	return config.NewSecret(v.r.Secret(name, required))
}

// Bool reads true or false.
func (v Vars) Bool(name string, def bool, help string) bool {
	v.note(name, strconv.FormatBool(def), help, false)
	if v.r == nil {
		return def
	}
	return v.r.Bool(name, def)
}

// IntRange reads an integer from lo to hi.
func (v Vars) IntRange(name string, def, lo, hi int, help string) int {
	v.note(name, strconv.Itoa(def), help+" ("+strconv.Itoa(lo)+".."+strconv.Itoa(hi)+")", false)
	if v.r == nil {
		return def
	}
	return v.r.IntRange(name, def, lo, hi)
}

// Email reads an e-mail address.
func (v Vars) Email(name string, required bool, help string) string {
	if required {
		help += " (required)"
	}
	v.note(name, "", help, false)
	if v.r == nil {
		return ""
	}
	return v.r.Email(name, "", required)
}

// List reads a comma-separated list.
func (v Vars) List(name, help string) []string {
	v.note(name, "", help, false)
	if v.r == nil {
		return nil
	}
	return v.r.List(name, nil)
}

// fail reports a bad value; a describing Vars has none.
func (v Vars) fail(name, want, got string) {
	if v.r != nil {
		v.r.Fail(name, want, got)
	}
}

// Describe lists every variable the installed extensions read, in the order
// Load reads them: EXTENSIONS__ENABLED, then each extension's base settings
// and its own. Settings of an extension that is off are read only when it is
// on, but all are listed.
func Describe(installed []Extension) []Var {
	var out []Var
	v := Vars{seen: &out}
	var apps []string
	for _, ext := range installed {
		if ext.Kind == App {
			apps = append(apps, ext.Name)
		}
	}
	v.List(EnabledVar, "comma-separated app extensions to turn on ("+strings.Join(apps, ", ")+"); names are case-insensitive; an unknown name stops start-up")
	for _, ext := range installed {
		env := envPrefix(ext.Name)
		switch ext.Kind {
		case App:
			readApp(v, ext, env)
		case Module:
			readModule(v, ext.Name, env)
		}
		if ext.Settings != nil {
			ext.Settings(v)
		}
	}
	return out
}
