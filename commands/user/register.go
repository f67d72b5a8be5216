package user

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Lookup finds the user owning a normalised address through its claim
// stream; nil when the address is free.
func Lookup(ctx context.Context, db store.DB, email string) (*State, error) {
	claim, err := store.Load(ctx, db, identity.EmailStream(email))
	if err != nil {
		return nil, err
	}
	return FromClaim(ctx, db, claim)
}

// FromClaim loads the user a loaded user-email-<email> stream points to;
// nil when the stream is empty. It lets a command load the claim together
// with its own streams in one round trip.
func FromClaim(ctx context.Context, db store.DB, claim []events.Envelope) (*State, error) {
	if len(claim) == 0 {
		return nil, nil
	}
	var c identity.EmailClaimed
	if _, err := claimFold.Apply(&c, claim); err != nil {
		return nil, err
	}
	u, err := Load(ctx, db, c.UserID)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, fmt.Errorf("address %s is claimed by user %d, whose stream is empty", c.Email, c.UserID)
	}
	return u, nil
}

// claimFold folds a user-email-<email> stream, whose only event is the
// claim.
var claimFold = commands.NewFold(
	commands.When(func(c *identity.EmailClaimed, e identity.EmailClaimed) { *c = e }),
)

// New describes a user to create.
type New struct {
	Email        string // normalised
	PasswordHash string
	IsStaff      bool
	IsSuperuser  bool
	Via          string
	SourceURL    string // optional; links the registration source
	SourceName   string
	// SessionID, when set, makes the registration a sign-in into that
	// session (the OTP verify of a new address).
	SessionID string
}

// ErrEmailTaken is returned by Create when the address already has a user.
var ErrEmailTaken = errors.New("a user with this e-mail already exists")

// NextID takes the next user id. Ids are assigned on the write side, so
// every event can carry the user's id; one lost to a failed command leaves
// a gap, as any sequence does.
func NextID(ctx context.Context, db store.DB) (int64, error) {
	var id int64
	if err := db.QueryRow(ctx, `SELECT nextval('user_ids')`).Scan(&id); err != nil {
		return 0, fmt.Errorf("next user id: %w", err)
	}
	return id, nil
}

// Register returns the writes that create user id: the address claim, which
// must not exist yet (a concurrent claim of the same address surfaces as a
// store conflict, so the caller retries from a fresh lookup and finds the
// user), and the user's first events. The caller appends them, together with
// whatever else its command writes, and gets the new user's state.
func Register(id int64, n New, md events.Metadata, now time.Time) ([]store.Write, *State, error) {
	claim, err := events.New(identity.EmailStream(n.Email), identity.EmailClaimed{Email: n.Email, UserID: id}, md, now)
	if err != nil {
		return nil, nil, err
	}
	reg := identity.UserRegistered{
		UserID: id, Email: n.Email, PasswordHash: n.PasswordHash, IsActive: true,
		IsStaff: n.IsStaff, IsSuperuser: n.IsSuperuser, JoinedAt: now.UTC(), Via: n.Via,
	}
	if n.SessionID != "" {
		at := now.UTC()
		reg.SignedInAt, reg.SessionID = &at, n.SessionID
	}
	evs := []events.Event{reg}
	if n.SourceURL != "" {
		evs = append(evs, identity.SourceLinked{UserID: id, SourceURL: n.SourceURL, SourceName: n.SourceName, LinkedAt: now.UTC()})
	}
	stream := identity.UserStream(id)
	envs := make([]events.Envelope, 0, len(evs))
	for i, e := range evs {
		env, err := events.New(stream, e, md, now)
		if err != nil {
			return nil, nil, err
		}
		env.Version = int64(i + 1) // what the append will assign to a new stream
		envs = append(envs, env)
	}
	s, err := Fold(envs)
	if err != nil {
		return nil, nil, err
	}
	return []store.Write{
		{Stream: identity.EmailStream(n.Email), Expected: events.NoStream, Events: []events.Envelope{claim}},
		{Stream: stream, Expected: events.NoStream, Events: envs},
	}, s, nil
}
