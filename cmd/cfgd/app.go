package main

import (
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/extensions"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/commands/signin"
	"github.com/cfgd/cfgd/deploy/config"
)

// appSettings is everything cfgd reads at start-up, one Config per module,
// so that every problem is reported at once before anything starts.
type appSettings struct {
	Core       settings.Core
	Signin     signin.Config
	AuthHTTP   auth.Config
	Extensions *extensions.Set
	RequestLog settings.RequestLog
}

// readApp reads every setting; problems are left in r. The error is for a
// faulty list of installed extensions, a programming error.
func readApp(r *config.Reader) (appSettings, error) {
	app := appSettings{Core: settings.ReadCore(r)}
	app.Signin, app.AuthHTTP = settings.ReadSignin(r, app.Core.HTTPAddr)
	app.RequestLog = settings.ReadRequestLog(r)
	set, err := extensions.Load(r, extensions.Builtin())
	if err != nil {
		return app, err
	}
	app.Extensions = set
	return app, nil
}
