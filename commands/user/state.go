// Package user holds the command handlers of the user aggregate (stream
// user-<id>, with the user-email-<email> claim stream for uniqueness):
// create-superuser and profile updates, plus the lookup and creation steps
// the OTP verify command runs inside its own transaction.
package user

import (
	"context"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/commands"
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
	Avatar       string // path under the media folder; "" for none
	Version      int64
}

// stateFold folds a user stream.
var stateFold = commands.NewFold(
	commands.When(func(s *State, e identity.UserRegistered) {
		s.ID, s.Email, s.FirstName, s.LastName = e.UserID, e.Email, e.FirstName, e.LastName
		s.PasswordHash, s.IsActive, s.IsStaff, s.IsSuperuser, s.JoinedAt = e.PasswordHash, e.IsActive, e.IsStaff, e.IsSuperuser, e.JoinedAt
		if e.SignedInAt != nil {
			s.LastLogin = *e.SignedInAt
		}
	}),
	commands.When(func(s *State, e identity.LoggedIn) { s.LastLogin = e.At }),
	commands.When(func(s *State, e identity.ProfileUpdated) {
		s.FirstName, s.LastName, s.Bio, s.Phone, s.DateOfBirth = e.FirstName, e.LastName, e.Bio, e.Phone, e.DateOfBirth
	}),
	commands.When(func(s *State, e identity.AvatarChanged) { s.Avatar = e.Avatar }),
)

// Fold builds the state of one user stream; nil for an empty stream.
func Fold(envs []events.Envelope) (*State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	s := &State{}
	v, err := stateFold.Apply(s, envs)
	if err != nil {
		return nil, err
	}
	if s.ID == 0 {
		return nil, fmt.Errorf("user stream %s has no %s event", envs[0].Stream, identity.UserRegistered{}.EventType())
	}
	s.Version = v
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
