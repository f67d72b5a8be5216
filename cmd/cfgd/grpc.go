package main

import (
	"context"
	"time"

	"github.com/cfgd/cfgd/api/auth"
	apigrpc "github.com/cfgd/cfgd/api/grpc"
	"github.com/cfgd/cfgd/api/protos"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/api/rpc"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/commands/apikey"
	"github.com/cfgd/cfgd/projections"
	projapikey "github.com/cfgd/cfgd/projections/apikey"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
	rmidentity "github.com/cfgd/cfgd/readmodels/identity"
)

// grpcSettings are the gRPC module's own settings.
type grpcSettings struct {
	ProtoDir string // GRPC__PROTO_DIR
}

func readGRPC(r *settings.Reader) grpcSettings {
	return grpcSettings{ProtoDir: r.String("GRPC__PROTO_DIR", "./data/protos")}
}

// runner is a background piece serve starts and stops with HTTP.
type runner func(ctx context.Context) error

// buildGRPC wires gRPC monitoring: the gRPC server on GRPC__ADDR, the API
// key commands, projection and read model, the REST endpoints under
// /api/grpc/, /cfg/grpc/ and /admin/api-keys/, and the proto files in
// GRPC__PROTO_DIR (written at start-up when missing or changed).
func buildGRPC(w wiring, a *auth.API) ([]*projections.Projection, runner, error) {
	keys := rmapikey.NewKeys(w.deps.pg, time.Now)
	keyAuth, err := rmapikey.NewAuthenticator(w.deps.pg, rmapikey.Config{CacheTTL: rmapikey.MaxCacheTTL})
	if err != nil {
		return nil, nil, err
	}
	jwt := w.app.Auth.JWT
	revocations := rmidentity.NewRevocations(w.deps.pg, jwt.RevocationPoll, jwt.AccessTTL, time.Now)
	srv, err := rpc.New(rpc.Config{Addr: w.app.Core.GRPCAddr, ShutdownTimeout: w.app.Core.ShutdownTimeout}, w.log,
		rpc.NewStoreAuthenticator(keyAuth, a.Tokens(), revocations, a.Users()))
	if err != nil {
		return nil, nil, err
	}
	srv.Register(&apikeysv1.APIKeyService_ServiceDesc, rpc.NewAPIKeys(keys, w.log))
	srv.Register(&monitorv1.MonitorService_ServiceDesc, rpc.NewMonitor(srv.Status))

	dir, err := protos.NewDir(w.app.GRPC.ProtoDir)
	if err != nil {
		return nil, nil, err
	}
	if res := dir.Generate(nil, false); len(res.Errors) > 0 {
		w.log.Warn("proto files not written (GRPC__PROTO_DIR); POST /cfg/grpc/proto-files/generate/ retries", "dir", dir.Root(), "errors", res.Errors)
	}
	err = apigrpc.Mount(w.router, apigrpc.Deps{
		Staff: a.Staff(), Pool: w.deps.pg, Keys: keys, KeyAuth: keyAuth,
		Create: apikey.NewCreateHandler(w.deps.pg, time.Now), Revoke: apikey.NewRevokeHandler(w.deps.pg, time.Now),
		Health: func() apigrpc.Health {
			st := srv.Status()
			return apigrpc.Health{Running: st.Running, Uptime: st.Uptime, Services: st.Services}
		},
		Protos: dir,
	})
	if err != nil {
		return nil, nil, err
	}
	return projapikey.All(), srv.Run, nil
}
