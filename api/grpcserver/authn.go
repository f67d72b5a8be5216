package grpcserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/cfgd/cfgd/commands/app/signin"
)

// SigninAuthenticator adapts the shared, transport-free authenticator
// (signin.Authenticator) to what the interceptors need: the HTTP
// middleware of api/auth is the other adapter over the same one, so a
// credential is accepted or refused the same way on both transports.
type SigninAuthenticator struct {
	auth *signin.Authenticator
}

var _ Authenticator = (*SigninAuthenticator)(nil)

// NewSigninAuthenticator adapts a.
func NewSigninAuthenticator(a *signin.Authenticator) *SigninAuthenticator {
	return &SigninAuthenticator{auth: a}
}

// APIKey checks a key, counting one use of it.
func (a *SigninAuthenticator) APIKey(ctx context.Context, raw string) (Principal, error) {
	p, err := a.auth.APIKey(ctx, raw)
	if err != nil {
		return Principal{}, credentialErr(err)
	}
	return Principal{UserID: p.UserID, KeyID: p.KeyID, KeyName: p.KeyName, Via: ViaAPIKey}, nil
}

// RecheckAPIKey checks a key again for an open stream, counting no use:
// the stream was counted once, when it started.
func (a *SigninAuthenticator) RecheckAPIKey(ctx context.Context, raw string) error {
	_, err := a.auth.CheckAPIKey(ctx, raw)
	return credentialErr(err)
}

// Bearer checks an access token (a refresh or cookie token is refused) and
// loads its user for the staff flag.
func (a *SigninAuthenticator) Bearer(ctx context.Context, raw string) (Principal, error) {
	p, err := a.auth.Bearer(ctx, raw)
	if err != nil {
		return Principal{}, credentialErr(err)
	}
	if err := a.auth.LoadUser(ctx, p); err != nil {
		return Principal{}, credentialErr(err)
	}
	if !p.User.IsActive {
		return Principal{}, fmt.Errorf("%w: inactive user", ErrUnauthenticated)
	}
	return Principal{UserID: p.UserID, Staff: p.User.IsStaff, Via: ViaBearer, Username: p.User.Email}, nil
}

// credentialErr marks a refused credential as ErrUnauthenticated; any
// other error is a failing dependency and stays as it is.
func credentialErr(err error) error {
	for _, refused := range []error{signin.ErrNoCredentials, signin.ErrInvalidToken, signin.ErrInvalidAPIKey} {
		if errors.Is(err, refused) {
			return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
	}
	return err
}
