package user

import (
	"context"
	"errors"

	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// ErrBadCredentials is the same whatever was wrong, so the answer does not
// tell whether the address has an account.
var ErrBadCredentials = errors.New("invalid e-mail or password")

// Authenticate checks an e-mail and password against the user's stream,
// the source of truth, never a read model: a forged event on the bus can
// change a read model but not the event store. It is the one password
// check of cfgd (the admin login command and HTTP Basic both use it). A
// password is hashed even for an unknown address, so timing does not tell.
func Authenticate(ctx context.Context, db store.DB, email, password string) (*State, error) {
	norm, err := identity.NormaliseEmail(email)
	var u *State
	if err == nil {
		if u, err = Lookup(ctx, db, norm); err != nil {
			return nil, err
		}
	}
	hash := ""
	if u != nil {
		hash = u.PasswordHash
	}
	if !CheckPassword(hash, password) || u == nil || !u.IsActive {
		return nil, ErrBadCredentials
	}
	return u, nil
}
