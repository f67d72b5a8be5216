package projectors

import (
	"context"
	"fmt"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// Projection names.
const (
	UsersName       = identityview.UsersProjection
	RevocationsName = "identity.revocations"
)

// Identity returns every identity projection.
func Identity() []*projections.Projection {
	return []*projections.Projection{Users(), Revocations()}
}

// IdentityGroupName is the projection group that feeds every identity projection
// from one consumer group.
const IdentityGroupName = "identity"

// IdentityGroup returns every identity projection in one group: one read of the
// topic and one transaction per batch for all of them.
func IdentityGroup() projections.Group {
	return projections.Group{Name: IdentityGroupName, Projections: Identity()}
}

// Users builds users, profiles, registration_sources and
// user_registration_sources. It handles every event of a user-<id> stream,
// so its checkpoint for that stream is the user's version, which tokens
// promise to readers.
func Users() *projections.Projection {
	p := projections.New(UsersName, "users", "profiles", "registration_sources", "user_registration_sources")
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.UserRegistered) error {
		var hash *string
		if e.PasswordHash != "" {
			hash = &e.PasswordHash
		}
		if err := tx.Exec(ctx, `
			INSERT INTO users (id, email, first_name, last_name, password_hash, is_active, is_staff, is_superuser, date_joined, last_login, version)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			e.UserID, e.Email, e.FirstName, e.LastName, hash, e.IsActive, e.IsStaff, e.IsSuperuser, e.JoinedAt, e.SignedInAt, env.Version); err != nil {
			return fmt.Errorf("insert user %d: %w", e.UserID, err)
		}
		if err := tx.Exec(ctx, `INSERT INTO profiles (user_id, created_at, updated_at) VALUES ($1, $2, $2)`, e.UserID, e.JoinedAt); err != nil {
			return fmt.Errorf("insert profile %d: %w", e.UserID, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.SourceLinked) error {
		// registration_source_id (migration 00005) finds or creates the
		// source without locking an existing row; the first name derived
		// for a URL stays. A NULL id would fail the NOT NULL column loudly.
		if err := tx.Exec(ctx, `
			INSERT INTO user_registration_sources (user_id, source_id, created_at)
			VALUES ($1, registration_source_id($2, $3, $4), $4)
			ON CONFLICT (user_id, source_id) DO NOTHING`, e.UserID, e.SourceURL, e.SourceName, e.LinkedAt); err != nil {
			return fmt.Errorf("link source: %w", err)
		}
		return bumpVersion(ctx, tx, e.UserID, env.Version)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.LoggedIn) error {
		if err := tx.Exec(ctx, `UPDATE users SET last_login = $2, version = $3 WHERE id = $1`, e.UserID, e.At, env.Version); err != nil {
			return fmt.Errorf("last login: %w", err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.ProfileUpdated) error {
		if err := tx.Exec(ctx, `UPDATE users SET first_name = $2, last_name = $3, version = $4 WHERE id = $1`,
			e.UserID, e.FirstName, e.LastName, env.Version); err != nil {
			return fmt.Errorf("update user: %w", err)
		}
		var dob *string
		if e.DateOfBirth != "" {
			dob = &e.DateOfBirth
		}
		if err := tx.Exec(ctx, `UPDATE profiles SET bio = $2, phone = $3, date_of_birth = $4::date, updated_at = $5 WHERE user_id = $1`,
			e.UserID, e.Bio, e.Phone, dob, e.At); err != nil {
			return fmt.Errorf("update profile: %w", err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.AvatarChanged) error {
		var avatar *string
		if e.Avatar != "" {
			avatar = &e.Avatar
		}
		if err := tx.Exec(ctx, `UPDATE profiles SET avatar = $2, updated_at = $3 WHERE user_id = $1`, e.UserID, avatar, e.At); err != nil {
			return fmt.Errorf("update avatar: %w", err)
		}
		return bumpVersion(ctx, tx, e.UserID, env.Version)
	})
	return p
}

func bumpVersion(ctx context.Context, tx projections.Tx, userID, version int64) error {
	if err := tx.Exec(ctx, `UPDATE users SET version = $2 WHERE id = $1`, userID, version); err != nil {
		return fmt.Errorf("user version: %w", err)
	}
	return nil
}

// Revocations builds session_revocations, the source of the access-token
// revocation set. Only revocations are projected: nothing reads a list of
// live sessions (the write side decides from the session streams), and
// every projected row costs a write.
func Revocations() *projections.Projection {
	p := projections.New(RevocationsName, "session_revocations")
	projections.On(p, func(ctx context.Context, tx projections.Tx, _ events.Envelope, e *identity.SessionRevoked) error {
		err := tx.Exec(ctx, `
			INSERT INTO session_revocations (session_id, user_id, kind, reason, revoked_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			e.SessionID, e.UserID, e.Kind, e.Reason, e.At, e.ExpiresAt)
		if err != nil {
			return fmt.Errorf("revoke session: %w", err)
		}
		return nil
	})
	return p
}
