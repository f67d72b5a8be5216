package apikeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/store"
)

// State is a key folded from its stream. It never holds the key itself.
type State struct {
	ID        int64
	Name      string
	KeyType   string
	KeyHash   string
	MaskedKey string
	UserID    int64
	UserEmail string
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt *time.Time
	Revoked   bool
	RevokedAt *time.Time
	Version   int64
}

// ErrNotFound is returned for a key id that has no stream.
var ErrNotFound = errors.New("no such API key")

// stateFold folds a key stream.
var stateFold = commands.NewFold(
	commands.When(func(s *State, e apikey.Created) {
		s.ID, s.Name, s.KeyType, s.KeyHash, s.MaskedKey = e.KeyID, e.Name, e.KeyType, e.KeyHash, e.MaskedKey
		s.UserID, s.UserEmail, s.CreatedBy, s.CreatedAt, s.ExpiresAt = e.UserID, e.UserEmail, e.CreatedBy, e.CreatedAt, e.ExpiresAt
	}),
	commands.When(func(s *State, e apikey.Revoked) {
		at := e.At
		s.Revoked, s.RevokedAt = true, &at
	}),
)

// Fold builds the state of one key stream; nil for an empty stream.
func Fold(envs []events.Envelope) (*State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	s := &State{}
	v, err := stateFold.Apply(s, envs)
	if err != nil {
		return nil, err
	}
	s.Version = v
	if s.ID == 0 {
		return nil, fmt.Errorf("API key stream %s has no %s event", envs[0].Stream, apikey.Created{}.EventType())
	}
	return s, nil
}

// Load folds the stream of key id; nil when it does not exist.
func Load(ctx context.Context, db store.DB, id int64) (*State, error) {
	envs, err := store.Load(ctx, db, apikey.Stream(id))
	if err != nil {
		return nil, err
	}
	return Fold(envs)
}
