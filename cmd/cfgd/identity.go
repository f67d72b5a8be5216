package main

import (
	"os"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/modules"

	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/apikey"
)

// identityModule is passwordless sign-in: the sign-in core and its HTTP
// side (api/identity). The HTTP side is returned too, for the middleware
// other modules protect their endpoints with.
//
// Every request an API key authenticates (HTTP or gRPC) is one use of the
// key, recorded at server time and sent to the usage topic, which the
// usage consumer counts into api_keys.
func identityModule(w wiring) (modules.Module, *auth.API, error) {
	signer := w.signer
	rc := apikey.DefaultUsageRecorderConfig(w.bus)
	rc.Signer = signer
	usage, err := apikey.NewUsageRecorder(rc, w.log)
	if err != nil {
		return modules.Module{}, nil, err
	}
	app, err := signin.New(w.app.Signin, signin.Deps{
		Pool: w.deps.pg, Events: w.deps.events, Redis: w.deps.redis, Log: w.log, Console: os.Stdout, Now: time.Now, Usage: usage,
	})
	if err != nil {
		return modules.Module{}, nil, err
	}
	logGeneratedKeys(w.log, append(w.generatedKeys, app.Generated...))
	m, a, err := modules.Identity(app, w.app.Identity, w.deps.pg, time.Now)
	if err != nil {
		return m, a, err
	}
	// A restarted replica answers no credential from read models older
	// than its start (docs/api.md#tokens).
	m.Checks = append(m.Checks, process.Check{Name: "auth-read-models", Ping: app.Auth.Ready})
	// Background runners stop after the servers: the last uses are sent.
	m.Background = append(m.Background, process.Runner{Name: "apikey-usage-recorder", Run: usage.Run})
	return m, a, nil
}
