package user

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
	if len(claim) == 0 {
		return nil, nil
	}
	c, err := identity.Data[identity.EmailClaimed](claim[0])
	if err != nil {
		return nil, err
	}
	u, err := Load(ctx, db, c.UserID)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, fmt.Errorf("address %s is claimed by user %d, whose stream is empty", email, c.UserID)
	}
	return u, nil
}

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

// Create assigns the next user id and appends the address claim and the
// user's first events inside tx. A concurrent claim of the same address
// surfaces as a store conflict, so the caller retries from a fresh Lookup
// and finds the user.
func Create(ctx context.Context, tx pgx.Tx, n New, md events.Metadata, now time.Time) (*State, error) {
	var id int64
	if err := tx.QueryRow(ctx, `SELECT nextval('user_ids')`).Scan(&id); err != nil {
		return nil, fmt.Errorf("next user id: %w", err)
	}
	claim, err := events.New(identity.EmailStream(n.Email), identity.EmailClaimed{Email: n.Email, UserID: id}, md, now)
	if err != nil {
		return nil, err
	}
	if _, err := store.Append(ctx, tx, identity.EmailStream(n.Email), events.NoStream, claim); err != nil {
		return nil, err
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
	for _, e := range evs {
		env, err := events.New(stream, e, md, now)
		if err != nil {
			return nil, err
		}
		envs = append(envs, env)
	}
	out, err := store.Append(ctx, tx, stream, events.NoStream, envs...)
	if err != nil {
		return nil, err
	}
	s, err := Fold(out)
	if err != nil {
		return nil, err
	}
	return s, nil
}
