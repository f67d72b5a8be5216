package config

import "slices"

// Source resolves a variable by the precedence process env > .env file.
// Only cmd/ builds one from the real environment (cmd/settings.Load); every
// other package receives its settings as a Config or, for the extensions
// whose settings are their own, as a Reader over a Source.
type Source struct {
	env    func(string) (string, bool)
	dotenv map[string]string
	// envNames lists the environment's variables, so that misspelled
	// ones can be found (Names); nil lists none.
	envNames func() []string
}

// NewSource layers env over dotenv; envNames lists the names env knows.
func NewSource(env func(string) (string, bool), envNames func() []string, dotenv map[string]string) *Source {
	return &Source{env: env, envNames: envNames, dotenv: dotenv}
}

// FromMaps builds a Source from explicit maps; tests use it to pin precedence.
func FromMaps(env, dotenv map[string]string) *Source {
	return NewSource(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}, func() []string {
		names := make([]string, 0, len(env))
		for k := range env {
			names = append(names, k)
		}
		return names
	}, dotenv)
}

// Origins of a value, as `cfgd config` shows them.
const (
	FromDefault     = "default"
	FromDotenv      = ".env"
	FromEnvironment = "environment"
)

// Origin tells where the value of name comes from.
func (s *Source) Origin(name string) string {
	if _, ok := s.env(name); ok {
		return FromEnvironment
	}
	if _, ok := s.dotenv[name]; ok {
		return FromDotenv
	}
	return FromDefault
}

// Names lists every variable set in the environment or the .env file,
// each once, sorted.
func (s *Source) Names() []string {
	seen := map[string]bool{}
	if s.envNames != nil {
		for _, n := range s.envNames() {
			seen[n] = true
		}
	}
	for n := range s.dotenv {
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Lookup returns the value of name and whether it was set anywhere.
func (s *Source) Lookup(name string) (string, bool) {
	if v, ok := s.env(name); ok {
		return v, true
	}
	v, ok := s.dotenv[name]
	return v, ok
}
