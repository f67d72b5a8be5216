package grpcadmin

import (
	"context"
	"errors"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// Paths served by Mount.
const (
	PathKeys        = "/api/grpc/api-keys/"
	PathKey         = "/api/grpc/api-keys/{id}/"
	PathKeyStats    = "/api/grpc/api-keys/stats/"
	PathHealth      = "/api/grpc/monitor/health/"
	PathProtoFiles  = "/cfg/grpc/proto-files/"
	PathProtoFile   = "/cfg/grpc/proto-files/{app_label}/"
	PathProtoZip    = "/cfg/grpc/proto-files/download-all/"
	PathProtoGen    = "/cfg/grpc/proto-files/generate/"
	PathAdminCreate = "/admin/api-keys/"
	PathAdminRevoke = "/admin/api-keys/{id}/revoke/"
)

// The commands, as the handlers use them.
type (
	keyCreator interface {
		Handle(ctx context.Context, cmd apikeys.Create) (apikeys.Created, error)
	}
	keyRevoker interface {
		Handle(ctx context.Context, cmd apikeys.Revoke) (*apikeys.State, error)
	}
)

// Health is the live gRPC server's state.
type Health struct {
	Running  bool
	Uptime   time.Duration
	Services int
}

// Deps is what Mount needs.
type Deps struct {
	// Staff is the admin middleware ((*auth.API).Staff()).
	Staff mux.MiddlewareFunc
	Pool  *pgxpool.Pool
	Keys  *apikeyview.Keys
	// StaffOrKey guards the proto-file endpoints: a valid X-API-Key, or
	// staff credentials ((*auth.API).StaffOrAPIKey()).
	StaffOrKey mux.MiddlewareFunc
	Create     keyCreator
	Revoke     keyRevoker
	// Health reads the live server.
	Health func() Health
	Protos *protos.Dir
	// ReadWait bounds how long an admin create waits for the read model
	// to show the new key; default 5s.
	ReadWait time.Duration
}

// Validate joins every missing dependency.
func (d Deps) Validate() error {
	var errs []error
	if d.Staff == nil || d.Pool == nil || d.Keys == nil || d.StaffOrKey == nil || d.Create == nil || d.Revoke == nil {
		errs = append(errs, errors.New("grpc api: staff middleware, pool, key read model, key authenticator and commands are required"))
	}
	if d.Health == nil {
		errs = append(errs, errors.New("grpc api: a health source is required"))
	}
	if d.Protos == nil {
		errs = append(errs, errors.New("grpc api: the proto folder is required"))
	}
	return errors.Join(errs...)
}

type handler struct{ Deps }

// Mount adds every endpoint to r.
func Mount(r *mux.Router, d Deps) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if d.ReadWait == 0 {
		d.ReadWait = 5 * time.Second
	}
	h := &handler{d}
	mountKeys(r, h)
	mountAdmin(r, h)
	mountHealth(r, h)
	mountProtoFiles(r, h)
	return nil
}
