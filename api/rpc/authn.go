package rpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/cfgd/cfgd/commands/token"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
	rmidentity "github.com/cfgd/cfgd/readmodels/identity"
)

// The pieces StoreAuthenticator reads, as it uses them.
type (
	keyChecker interface {
		Authenticate(ctx context.Context, raw string) (rmapikey.Owner, error)
	}
	tokenParser interface {
		Parse(raw string, want token.Kind) (*token.Claims, error)
	}
	revocationSet interface {
		Revoked(ctx context.Context, sessionID string) (bool, error)
	}
	userReader interface {
		ByID(ctx context.Context, id, atLeast int64) (rmidentity.User, error)
	}
)

// StoreAuthenticator authenticates from the read models: API keys by hash
// in api_keys, access tokens by signature, kind and the revocation set. It
// is a thin adapter meant to give way to the shared authenticator.
type StoreAuthenticator struct {
	keys        keyChecker
	tokens      tokenParser
	revocations revocationSet
	users       userReader
}

var _ Authenticator = (*StoreAuthenticator)(nil)

// NewStoreAuthenticator returns the adapter.
func NewStoreAuthenticator(keys keyChecker, tokens tokenParser, revocations revocationSet, users userReader) *StoreAuthenticator {
	return &StoreAuthenticator{keys: keys, tokens: tokens, revocations: revocations, users: users}
}

// APIKey checks a key.
func (a *StoreAuthenticator) APIKey(ctx context.Context, raw string) (Principal, error) {
	o, err := a.keys.Authenticate(ctx, raw)
	if errors.Is(err, rmapikey.ErrInvalidKey) {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if err != nil {
		return Principal{}, err
	}
	return Principal{UserID: o.UserID, KeyID: o.KeyID, KeyName: o.KeyName, Via: ViaAPIKey}, nil
}

// Bearer checks an access token; a refresh or cookie token is refused.
func (a *StoreAuthenticator) Bearer(ctx context.Context, raw string) (Principal, error) {
	claims, err := a.tokens.Parse(raw, token.Access)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	revoked, err := a.revocations.Revoked(ctx, claims.SessionID)
	if err != nil {
		return Principal{}, err
	}
	if revoked {
		return Principal{}, fmt.Errorf("%w: session revoked", ErrUnauthenticated)
	}
	u, err := a.users.ByID(ctx, claims.UserID(), claims.UserVersion)
	if errors.Is(err, rmidentity.ErrNotFound) {
		return Principal{}, fmt.Errorf("%w: unknown user", ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	if !u.IsActive {
		return Principal{}, fmt.Errorf("%w: inactive user", ErrUnauthenticated)
	}
	return Principal{UserID: u.ID, Staff: u.IsStaff, Via: ViaBearer}, nil
}
