// Package settings reads cfgd's configuration from the process: the
// environment first, then a .env file, then the defaults of each package's
// DefaultConfig. Names are nested with double underscores
// (SECTION__VARIABLE); each is written once, with its help, in the table
// that loading, Table (the CLI's listing) and docs/settings.md share.
// Every problem is collected so that start-up can stop with one clear line
// per bad value. It is the only place that reads the environment; what it
// reads flows down into each package's own Config.
package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/joho/godotenv"

	"github.com/cfgd/cfgd/deploy/config"
)

// Load builds a Source from the process environment and the .env file at
// path. A missing file is not an error: the file is optional.
func Load(path string) (*config.Source, error) {
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
	return config.NewSource(os.LookupEnv, environNames, dot), nil
}

func environNames() []string {
	env := os.Environ()
	names := make([]string, 0, len(env))
	for _, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok {
			names = append(names, name)
		}
	}
	return names
}
