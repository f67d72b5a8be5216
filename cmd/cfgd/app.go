package main

import "github.com/cfgd/cfgd/cmd/settings"

// appSettings is everything cfgd reads at start-up, so that every problem
// is reported at once before anything starts.
type appSettings struct {
	Core settings.Core
}

func readApp(r *settings.Reader) appSettings {
	return appSettings{Core: settings.ReadCore(r)}
}
