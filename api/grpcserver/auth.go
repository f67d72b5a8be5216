package grpcserver

import (
	"context"
	"errors"
	"log/slog"

	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc/metadata"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// Principal is who made a call.
type Principal struct {
	UserID  int64
	Staff   bool   // an active staff user (Bearer only)
	KeyID   int64  // set when authenticated by API key
	KeyName string // set when authenticated by API key
	Via     string // ViaAPIKey or ViaBearer
	// Username is the user's e-mail address (SPEC's username), when the
	// user was loaded (Bearer).
	Username string
}

// Ways a caller authenticates.
const (
	ViaAPIKey = "api_key"
	ViaBearer = "bearer"
)

// Authenticator turns credentials into a principal. It returns an error
// wrapping ErrUnauthenticated for credentials that are wrong; any other
// error is a failing dependency.
type Authenticator interface {
	APIKey(ctx context.Context, raw string) (Principal, error)
	Bearer(ctx context.Context, raw string) (Principal, error)
}

// ErrUnauthenticated marks bad credentials.
var ErrUnauthenticated = errors.New("unauthenticated")

// Metadata keys of the credentials.
const (
	HeaderAPIKey        = "x-api-key"
	HeaderAuthorization = "authorization"
)

type principalKey struct{}

// PrincipalFrom returns the caller put in ctx by the auth interceptor.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func authFunc(a Authenticator, log *slog.Logger) grpcauth.AuthFunc {
	return func(ctx context.Context) (context.Context, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		var (
			p   Principal
			err error
		)
		if keys := md.Get(HeaderAPIKey); len(keys) > 0 {
			p, err = a.APIKey(ctx, keys[0])
		} else if tok, terr := grpcauth.AuthFromMD(ctx, "bearer"); terr == nil {
			p, err = a.Bearer(ctx, tok)
		} else {
			return nil, errcode.New(errcode.NotAuthenticated, "send an API key in x-api-key or a Bearer access token in authorization")
		}
		switch {
		case errors.Is(err, ErrUnauthenticated):
			return nil, errcode.New(errcode.TokenNotValid, "invalid, revoked or expired credentials")
		case err != nil:
			log.WarnContext(ctx, "grpc authentication unavailable", "err", err)
			return nil, errcode.Wrap(errcode.Unavailable, "authentication is unavailable, try again shortly", err)
		}
		notePrincipal(ctx, p)
		return WithPrincipal(ctx, p), nil
	}
}

// RequireStaff lets through active staff users only, as the REST API's
// staff endpoints do: an API key is a machine credential, never staff, so
// a key caller gets PermissionDenied.
func RequireStaff(ctx context.Context) error {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return errcode.New(errcode.NotAuthenticated, "not authenticated")
	}
	if p.Via != ViaBearer || !p.Staff {
		return errcode.New(errcode.Forbidden, "staff only: sign in as a staff user (an API key is not staff)")
	}
	return nil
}
