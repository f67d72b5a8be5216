package identityview

import (
	"context"
	"fmt"
	"time"
)

// Execer runs one write statement; the projection runner's transaction
// (projections.Tx) satisfies it. The writes below are the only statements
// that change the tables this package owns: the projections call them and
// hold no SQL.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) error
}

// NewUser is a registered user, as the users projection inserts it.
type NewUser struct {
	ID           int64
	Email        string
	FirstName    string
	LastName     string
	PasswordHash string // empty: none (a NULL column)
	IsActive     bool
	IsStaff      bool
	IsSuperuser  bool
	JoinedAt     time.Time
	SignedInAt   *time.Time
	Version      int64
}

const insertUser = `
	INSERT INTO users (id, email, first_name, last_name, password_hash, is_active, is_staff, is_superuser, date_joined, last_login, version)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// InsertUser inserts u and its empty profile.
func InsertUser(ctx context.Context, tx Execer, u NewUser) error {
	if err := tx.Exec(ctx, insertUser, u.ID, u.Email, u.FirstName, u.LastName, nullIfEmpty(u.PasswordHash),
		u.IsActive, u.IsStaff, u.IsSuperuser, u.JoinedAt, u.SignedInAt, u.Version); err != nil {
		return fmt.Errorf("insert user %d: %w", u.ID, err)
	}
	if err := tx.Exec(ctx, `INSERT INTO profiles (user_id, created_at, updated_at) VALUES ($1, $2, $2)`, u.ID, u.JoinedAt); err != nil {
		return fmt.Errorf("insert profile %d: %w", u.ID, err)
	}
	return nil
}

// linkSource uses registration_source_id (migration 00005), which finds or
// creates the source without locking an existing row; the first name
// derived for a URL stays. A NULL id would fail the NOT NULL column loudly.
const linkSource = `
	INSERT INTO user_registration_sources (user_id, source_id, created_at)
	VALUES ($1, registration_source_id($2, $3, $4), $4)
	ON CONFLICT (user_id, source_id) DO NOTHING`

// LinkSource links user userID to the source at url (created, named name,
// if new) once, at at, and sets the user's version.
func LinkSource(ctx context.Context, tx Execer, userID int64, url, name string, at time.Time, version int64) error {
	if err := tx.Exec(ctx, linkSource, userID, url, name, at); err != nil {
		return fmt.Errorf("link source: %w", err)
	}
	return SetUserVersion(ctx, tx, userID, version)
}

// SetLastLogin records a sign-in of user userID at at, at version.
func SetLastLogin(ctx context.Context, tx Execer, userID int64, at time.Time, version int64) error {
	if err := tx.Exec(ctx, `UPDATE users SET last_login = $2, version = $3 WHERE id = $1`, userID, at, version); err != nil {
		return fmt.Errorf("last login: %w", err)
	}
	return nil
}

// ProfileChange is an update of a user's names and profile.
type ProfileChange struct {
	UserID      int64
	FirstName   string
	LastName    string
	Bio         string
	Phone       string
	DateOfBirth string // YYYY-MM-DD; empty: none (a NULL column)
	At          time.Time
	Version     int64
}

// UpdateProfile applies c to the user and their profile.
func UpdateProfile(ctx context.Context, tx Execer, c ProfileChange) error {
	if err := tx.Exec(ctx, `UPDATE users SET first_name = $2, last_name = $3, version = $4 WHERE id = $1`,
		c.UserID, c.FirstName, c.LastName, c.Version); err != nil {
		return fmt.Errorf("update user: %w", err)
	}
	if err := tx.Exec(ctx, `UPDATE profiles SET bio = $2, phone = $3, date_of_birth = $4::date, updated_at = $5 WHERE user_id = $1`,
		c.UserID, c.Bio, c.Phone, nullIfEmpty(c.DateOfBirth), c.At); err != nil {
		return fmt.Errorf("update profile: %w", err)
	}
	return nil
}

// SetAvatar sets (empty: clears) user userID's avatar at at, at version.
func SetAvatar(ctx context.Context, tx Execer, userID int64, avatar string, at time.Time, version int64) error {
	if err := tx.Exec(ctx, `UPDATE profiles SET avatar = $2, updated_at = $3 WHERE user_id = $1`, userID, nullIfEmpty(avatar), at); err != nil {
		return fmt.Errorf("update avatar: %w", err)
	}
	return SetUserVersion(ctx, tx, userID, version)
}

// SetUserVersion records that user userID's row reflects version.
func SetUserVersion(ctx context.Context, tx Execer, userID, version int64) error {
	if err := tx.Exec(ctx, `UPDATE users SET version = $2 WHERE id = $1`, userID, version); err != nil {
		return fmt.Errorf("user version: %w", err)
	}
	return nil
}

// Revocation is one revoked session.
type Revocation struct {
	SessionID string
	UserID    int64
	Kind      string
	Reason    string
	RevokedAt time.Time
	ExpiresAt time.Time
}

// insertRevocation skips a session that has already ended (the database's
// clock, as the sweep's): the sweep would delete its row, so a replay and
// the live table agree on it.
const insertRevocation = `
	INSERT INTO session_revocations (session_id, user_id, kind, reason, revoked_at, expires_at)
	SELECT $1, $2, $3, $4, $5, $6 WHERE $6::timestamptz > now()`

// InsertRevocation records r, unless its session has already ended.
func InsertRevocation(ctx context.Context, tx Execer, r Revocation) error {
	if err := tx.Exec(ctx, insertRevocation, r.SessionID, r.UserID, r.Kind, r.Reason, r.RevokedAt, r.ExpiresAt); err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
