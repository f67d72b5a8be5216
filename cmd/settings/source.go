// Package settings reads cfgd's configuration: the process environment first,
// then a .env file, then the defaults written next to each read. Names are
// nested with double underscores (SECTION__VARIABLE). Every problem is
// collected so that start-up can stop with one clear line per bad value.
package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/joho/godotenv"
)

// Source resolves a variable by the precedence process env > .env file.
type Source struct {
	env    func(string) (string, bool)
	dotenv map[string]string
}

// Load builds a Source from the process environment and the .env file at
// path. A missing file is not an error: the file is optional.
func Load(path string) (*Source, error) {
	dot := map[string]string{}
	if path != "" {
		m, err := godotenv.Read(path)
		switch {
		case err == nil:
			dot = m
		case errors.Is(err, fs.ErrNotExist):
		default:
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return &Source{env: os.LookupEnv, dotenv: dot}, nil
}

// FromMaps builds a Source from explicit maps; tests use it to pin precedence.
func FromMaps(env, dotenv map[string]string) *Source {
	return &Source{
		env: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		dotenv: dotenv,
	}
}

// Lookup returns the value of name and whether it was set anywhere.
func (s *Source) Lookup(name string) (string, bool) {
	if v, ok := s.env(name); ok {
		return v, true
	}
	v, ok := s.dotenv[name]
	return v, ok
}
