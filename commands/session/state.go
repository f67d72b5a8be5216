// Package session holds the command handlers of the session aggregate
// (stream session-<uuid>): refreshing an API token pair, logging out, and
// the admin password login that opens a cookie session. StartAPI opens an
// API session inside the OTP verify's transaction.
package session

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Tokens is what the session commands need of the token service.
type Tokens interface {
	Issue(sp token.Spec) (token.Issued, error)
	Parse(raw string, want token.Kind) (*token.Claims, error)
	TTL(k token.Kind) time.Duration
}

var _ Tokens = (*token.Service)(nil)

// ErrInvalidToken covers a bad, expired, revoked or superseded token.
var ErrInvalidToken = errcode.New(errcode.TokenNotValid, "Token is invalid or expired")

// State is a session folded from its stream.
type State struct {
	ID          string
	UserID      int64
	Kind        string
	RefreshID   string          // the refresh jti currently valid
	Rotated     map[string]bool // refresh jtis exchanged under rotation
	UserVersion int64
	StartedAt   time.Time
	ExpiresAt   time.Time
	Revoked     bool
	Version     int64
}

// stateFold folds a session stream.
var stateFold = commands.NewFold(
	commands.When(func(s *State, e identity.SessionStarted) {
		s.ID, s.UserID, s.Kind, s.RefreshID, s.UserVersion = e.SessionID, e.UserID, e.Kind, e.RefreshID, e.UserVersion
		s.StartedAt, s.ExpiresAt = e.StartedAt, e.ExpiresAt
	}),
	commands.When(func(s *State, e identity.SessionRefreshed) {
		s.Rotated[e.PreviousID] = true
		s.RefreshID, s.ExpiresAt = e.RefreshID, e.ExpiresAt
	}),
	commands.When(func(s *State, _ identity.SessionRevoked) { s.Revoked = true }),
)

// Fold builds the state of one session stream; nil for an empty stream.
func Fold(envs []events.Envelope) (*State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	s := &State{Rotated: map[string]bool{}}
	v, err := stateFold.Apply(s, envs)
	if err != nil {
		return nil, err
	}
	if s.ID == "" {
		return nil, fmt.Errorf("session stream %s has no %s event", envs[0].Stream, identity.SessionStarted{}.EventType())
	}
	s.Version = v
	return s, nil
}

// Load folds the stream of session id; nil when it does not exist.
func Load(ctx context.Context, db store.DB, id string) (*State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, nil
	}
	envs, err := store.Load(ctx, db, identity.SessionStream(id))
	if err != nil {
		return nil, err
	}
	return Fold(envs)
}

// Pair is a new API session's tokens.
type Pair struct {
	SessionID string
	Access    token.Issued
	Refresh   token.Issued
}

// StartAPI returns the write that opens API session sid (session.started
// on a new stream) and its signed token pair. The caller appends the write
// with the rest of its command and hands the tokens out only once that
// committed. userVersion is the user stream version the tokens promise to
// readers.
func StartAPI(tokens Tokens, sid string, userID, userVersion int64, md events.Metadata, now time.Time) (store.Write, Pair, error) {
	refreshID := uuid.NewString()
	exp := now.Add(tokens.TTL(token.Refresh))
	stream := identity.SessionStream(sid)
	env, err := events.New(stream, identity.SessionStarted{
		SessionID: sid, UserID: userID, Kind: identity.SessionAPI, RefreshID: refreshID,
		UserVersion: userVersion, StartedAt: now.UTC(), ExpiresAt: exp.UTC(),
	}, md, now)
	if err != nil {
		return store.Write{}, Pair{}, err
	}
	access, err := tokens.Issue(token.Spec{Kind: token.Access, UserID: userID, SessionID: sid, UserVersion: userVersion, IssuedAt: now})
	if err != nil {
		return store.Write{}, Pair{}, err
	}
	refresh, err := tokens.Issue(token.Spec{Kind: token.Refresh, UserID: userID, SessionID: sid, ID: refreshID, UserVersion: userVersion, IssuedAt: now, ExpiresAt: exp})
	if err != nil {
		return store.Write{}, Pair{}, err
	}
	w := store.Write{Stream: stream, Expected: events.NoStream, Events: []events.Envelope{env}}
	return w, Pair{SessionID: sid, Access: access, Refresh: refresh}, nil
}

// revoke returns the write that appends session.revoked at the session's
// version.
func revoke(s *State, reason string, md events.Metadata, now time.Time) (store.Write, error) {
	stream := identity.SessionStream(s.ID)
	env, err := events.New(stream, identity.SessionRevoked{
		SessionID: s.ID, UserID: s.UserID, Kind: s.Kind, Reason: reason, At: now.UTC(), ExpiresAt: s.ExpiresAt,
	}, md, now)
	if err != nil {
		return store.Write{}, err
	}
	return store.Write{Stream: stream, Expected: s.Version, Events: []events.Envelope{env}}, nil
}
