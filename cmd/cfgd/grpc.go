package main

import (
	"time"

	"github.com/cfgd/cfgd/api/auth"
	apigrpc "github.com/cfgd/cfgd/api/grpc"
	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/api/rpc"
)

// grpcModule is gRPC monitoring: the gRPC server on GRPC__ADDR, API keys
// (commands, projection, read model), the REST endpoints under /api/grpc/,
// /cfg/grpc/ and /admin/api-keys/, and the proto files in GRPC__PROTO_DIR.
func grpcModule(w wiring, a *auth.API) (module.Module, error) {
	p, err := apigrpc.NewModule(apigrpc.Config{
		RPC:      rpc.Config{Addr: w.app.Core.GRPCAddr, ShutdownTimeout: w.app.Core.ShutdownTimeout},
		ProtoDir: w.app.GRPCProtoDir,
		Events:   w.deps.events,
	}, a, w.deps.pg, w.log, time.Now)
	return p.Module, err
}
