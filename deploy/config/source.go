package config

// Source resolves a variable by the precedence process env > .env file.
// Only cmd/ builds one from the real environment (cmd/settings.Load); every
// other package receives its settings as a Config or, for the extensions
// whose settings are their own, as a Reader over a Source.
type Source struct {
	env    func(string) (string, bool)
	dotenv map[string]string
}

// NewSource layers env over dotenv.
func NewSource(env func(string) (string, bool), dotenv map[string]string) *Source {
	return &Source{env: env, dotenv: dotenv}
}

// FromMaps builds a Source from explicit maps; tests use it to pin precedence.
func FromMaps(env, dotenv map[string]string) *Source {
	return NewSource(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}, dotenv)
}

// Lookup returns the value of name and whether it was set anywhere.
func (s *Source) Lookup(name string) (string, bool) {
	if v, ok := s.env(name); ok {
		return v, true
	}
	v, ok := s.dotenv[name]
	return v, ok
}
