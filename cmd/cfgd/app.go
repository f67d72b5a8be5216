package main

import (
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/extensions"
	"github.com/cfgd/cfgd/cmd/settings"
)

// appSettings is everything cfgd reads at start-up, so that every problem
// is reported at once before anything starts.
type appSettings struct {
	Core       settings.Core
	Auth       auth.Settings
	Extensions *extensions.Set
	GRPC       grpcSettings
}

// readApp reads every setting; problems are left in r. The error is for a
// faulty list of installed extensions, a programming error.
func readApp(r *settings.Reader) (appSettings, error) {
	app := appSettings{Core: settings.ReadCore(r), Auth: auth.ReadSettings(r), GRPC: readGRPC(r)}
	set, err := extensions.Load(r, extensions.Builtin())
	if err != nil {
		return app, err
	}
	app.Extensions = set
	return app, nil
}
