package main

import (
	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/extensions"
	"github.com/cfgd/cfgd/cmd/cfgd/modules"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/config"
)

// appSettings is everything cfgd reads at start-up, one Config per module,
// so that every problem is reported at once before anything starts.
type appSettings struct {
	Core     settings.Core
	Signin   signin.Config
	Identity modules.IdentityConfig
	Front    pages.FrontConfig
	// GRPCProtoDir is where the proto files are written (GRPC__PROTO_DIR).
	GRPCProtoDir string
	Extensions   *extensions.Set
	Tasks        taskqueues.Config
	RequestLog   settings.RequestLog
	// GRPCLimits bound the gRPC server's connections (GRPC__*).
	GRPCLimits grpcserver.Limits
}

// readApp reads every setting; problems are left in r. The error is for a
// faulty list of installed extensions, a programming error.
func readApp(r *config.Reader) (appSettings, error) {
	app := appSettings{Core: settings.ReadCore(r)}
	app.Signin, app.Identity.HTTP = settings.ReadSignin(r, app.Core.HTTPAddr)
	app.Identity.Media, app.Identity.Profile = settings.ReadMedia(r), settings.ReadProfile(r)
	app.Front = settings.ReadFront(r)
	app.GRPCProtoDir = app.Core.GRPCProtoDir
	app.Tasks = settings.ReadTasks(r, app.Core.RedisURL)
	app.RequestLog = settings.ReadRequestLog(r)
	app.GRPCLimits = settings.ReadGRPC(r)
	set, err := extensions.Load(r, extensions.Builtin())
	if err != nil {
		return app, err
	}
	app.Extensions = set
	return app, nil
}
