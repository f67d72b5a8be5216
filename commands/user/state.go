// Package user holds the command handlers of the user aggregate (stream
// user-<id>, with the user-email-<email> claim stream for uniqueness):
// create-superuser and profile updates, plus the lookup and creation steps
// the OTP verify command runs inside its own transaction.
package user

import (
	"context"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// State is a user folded from their stream.
type State struct {
	ID           int64
	Email        string
	FirstName    string
	LastName     string
	PasswordHash string
	IsActive     bool
	IsStaff      bool
	IsSuperuser  bool
	JoinedAt     time.Time
	LastLogin    time.Time
	Bio          string
	Phone        string
	DateOfBirth  string
	Avatar       string // path under the media directory; empty: none
	Version      int64
}

// Fold builds the state of one user stream.
func Fold(envs []events.Envelope) (*State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	s := &State{}
	for _, env := range envs {
		s.Version = env.Version
		switch env.Type {
		case identity.UserRegistered{}.EventType():
			e, err := identity.Data[identity.UserRegistered](env)
			if err != nil {
				return nil, err
			}
			s.ID, s.Email, s.FirstName, s.LastName = e.UserID, e.Email, e.FirstName, e.LastName
			s.PasswordHash, s.IsActive, s.IsStaff, s.IsSuperuser, s.JoinedAt = e.PasswordHash, e.IsActive, e.IsStaff, e.IsSuperuser, e.JoinedAt
			if e.SignedInAt != nil {
				s.LastLogin = *e.SignedInAt
			}
		case identity.LoggedIn{}.EventType():
			e, err := identity.Data[identity.LoggedIn](env)
			if err != nil {
				return nil, err
			}
			s.LastLogin = e.At
		case identity.ProfileUpdated{}.EventType():
			e, err := identity.Data[identity.ProfileUpdated](env)
			if err != nil {
				return nil, err
			}
			s.FirstName, s.LastName, s.Bio, s.Phone, s.DateOfBirth = e.FirstName, e.LastName, e.Bio, e.Phone, e.DateOfBirth
		case identity.AvatarChanged{}.EventType():
			e, err := identity.Data[identity.AvatarChanged](env)
			if err != nil {
				return nil, err
			}
			s.Avatar = e.Avatar
		}
	}
	if s.ID == 0 {
		return nil, fmt.Errorf("user stream %s has no %s event", envs[0].Stream, identity.UserRegistered{}.EventType())
	}
	return s, nil
}

// Load folds the stream of user id; nil when it does not exist.
func Load(ctx context.Context, db store.DB, id int64) (*State, error) {
	envs, err := store.Load(ctx, db, identity.UserStream(id))
	if err != nil {
		return nil, err
	}
	return Fold(envs)
}
