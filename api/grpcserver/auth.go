package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
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
	// Username is the user's e-mail address (the API's username), when the
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
	// APIKey checks a key and counts one use of it (a call, or a stream).
	APIKey(ctx context.Context, raw string) (Principal, error)
	// RecheckAPIKey checks a key again for an open stream, counting no
	// use.
	RecheckAPIKey(ctx context.Context, raw string) error
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
		p, err := authenticate(ctx, a, false, log)
		if err != nil {
			return nil, err
		}
		notePrincipal(ctx, p)
		return WithPrincipal(ctx, p), nil
	}
}

// authenticate checks the credentials in ctx's metadata: the call's, or
// an open stream's again (again: an API key's use was counted already,
// and the principal is not needed).
func authenticate(ctx context.Context, a Authenticator, again bool, log *slog.Logger) (Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var (
		p   Principal
		err error
	)
	if keys := md.Get(HeaderAPIKey); len(keys) > 0 && again {
		err = a.RecheckAPIKey(ctx, keys[0])
	} else if len(keys) > 0 {
		p, err = a.APIKey(ctx, keys[0])
	} else if tok, terr := grpcauth.AuthFromMD(ctx, "bearer"); terr == nil {
		p, err = a.Bearer(ctx, tok)
	} else {
		return Principal{}, errcode.New(errcode.NotAuthenticated, "send an API key in x-api-key or a Bearer access token in authorization")
	}
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return Principal{}, errcode.New(errcode.TokenNotValid, "invalid, revoked or expired credentials")
	case err != nil:
		log.WarnContext(ctx, "grpc authentication unavailable", "err", err)
		return Principal{}, errcode.Wrap(errcode.Unavailable, "authentication is unavailable, try again shortly", err)
	}
	return p, nil
}

// errRevoked ends a stream whose credentials stopped being valid.
var errRevoked = errcode.New(errcode.TokenNotValid, "credentials revoked or expired while the stream was open")

// streamRecheck checks an open stream's credentials again every interval
// (the check at the start is the auth interceptor's): once they are
// refused (a revoked or expired key, a revoked session, an expired access
// token) the stream ends with Unauthenticated, also when its handler is
// blocked waiting for the client's next message. A failing dependency
// leaves the stream open; the next check decides. A recheck counts no
// use of an API key: a stream is one use, counted when it started.
func streamRecheck(a Authenticator, every time.Duration, log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancelCause(ss.Context())
		defer cancel(nil)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-t.C:
				}
				_, err := authenticate(ss.Context(), a, true, log)
				var e *errcode.Error
				if errors.As(err, &e) && e.Code != errcode.Unavailable {
					cancel(errRevoked)
					return
				}
			}
		}()
		err := handler(srv, &checkedStream{ServerStream: ss, ctx: ctx})
		if errors.Is(context.Cause(ctx), errRevoked) {
			return errRevoked
		}
		return err
	}
}

// checkedStream is a stream that ends when its context does: a receive
// blocked on the client returns then, and nothing more is sent.
type checkedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) SendMsg(m any) error {
	if context.Cause(s.ctx) == errRevoked {
		return errRevoked
	}
	return s.ServerStream.SendMsg(m)
}

func (s *checkedStream) RecvMsg(m any) error {
	if context.Cause(s.ctx) == errRevoked {
		return errRevoked
	}
	done := make(chan error, 1)
	// The receive runs aside so a revocation need not wait for the
	// client's next message; when it wins, the handler returns, the call
	// ends, and the receive left behind returns with the stream.
	go func() { done <- s.ServerStream.RecvMsg(m) }()
	select {
	case err := <-done:
		return err
	case <-s.ctx.Done():
		if context.Cause(s.ctx) == errRevoked {
			return errRevoked
		}
		return <-done
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
