package identityview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

// DB is what the queries need; *pgxpool.Pool satisfies it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// User is a row of the users read model.
type User struct {
	ID           int64
	Email        string
	FirstName    string
	LastName     string
	PasswordHash string
	IsActive     bool
	IsStaff      bool
	IsSuperuser  bool
	DateJoined   time.Time
	LastLogin    *time.Time
	Version      int64
}

// FullName is first and last name joined by one space, trimmed (docs/api.md, Profile).
func (u User) FullName() string { return strings.TrimSpace(u.FirstName + " " + u.LastName) }

// ShortName is the first name.
func (u User) ShortName() string { return u.FirstName }

// Profile is a row of the profiles read model.
type Profile struct {
	Bio         string
	Avatar      *string // avatars/<user id>/<file>, relative to the media directory
	Phone       string
	DateOfBirth *string // YYYY-MM-DD
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// ErrNotFound is returned for a user the read model does not have (yet).
var ErrNotFound = errors.New("not found")

// Users queries users and profiles.
type Users struct {
	db DB
	// Wait bounds how long a read waits for the projection to reach the
	// version a token promises.
	wait time.Duration
}

// NewUsers returns the query object.
func NewUsers(db DB, wait time.Duration) *Users { return &Users{db: db, wait: wait} }

const selectUser = `SELECT id, email, first_name, last_name, coalesce(password_hash, ''), is_active, is_staff, is_superuser, date_joined, last_login, version FROM users`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Email, &u.FirstName, &u.LastName, &u.PasswordHash, &u.IsActive, &u.IsStaff, &u.IsSuperuser, &u.DateJoined, &u.LastLogin, &u.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, ErrNotFound
	}
	return u, err
}

// ByID returns user id as of at least version atLeast, waiting for the
// projection if it is behind (read-your-writes); 0 reads whatever is there.
func (q *Users) ByID(ctx context.Context, id, atLeast int64) (User, error) {
	u, err := scanUser(q.db.QueryRow(ctx, selectUser+` WHERE id = $1`, id))
	if err == nil && u.Version >= atLeast {
		return u, nil
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return u, fmt.Errorf("user %d: %w", id, err)
	}
	if atLeast < 1 {
		return u, ErrNotFound
	}
	if err := q.waitFor(ctx, id, atLeast); err != nil {
		return User{}, err
	}
	u, err = scanUser(q.db.QueryRow(ctx, selectUser+` WHERE id = $1`, id))
	if err != nil {
		return u, fmt.Errorf("user %d: %w", id, err)
	}
	return u, nil
}

func (q *Users) waitFor(ctx context.Context, id, version int64) error {
	wctx, cancel := context.WithTimeout(ctx, q.wait)
	defer cancel()
	if err := checkpoints.Wait(wctx, q.db, UsersProjection, identity.UserStream(id), version); err != nil {
		return fmt.Errorf("user %d is not projected yet: %w", id, err)
	}
	return nil
}

// ByEmail returns the user with a normalised address.
func (q *Users) ByEmail(ctx context.Context, email string) (User, error) {
	u, err := scanUser(q.db.QueryRow(ctx, selectUser+` WHERE email = $1`, email))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return u, fmt.Errorf("user by email: %w", err)
	}
	return u, err
}

// Profile returns user id and their profile as of at least version atLeast.
func (q *Users) Profile(ctx context.Context, id, atLeast int64) (User, Profile, error) {
	u, err := q.ByID(ctx, id, atLeast)
	if err != nil {
		return u, Profile{}, err
	}
	var p Profile
	var dob *time.Time
	err = q.db.QueryRow(ctx, `SELECT bio, avatar, phone, date_of_birth, created_at, updated_at FROM profiles WHERE user_id = $1`, id).
		Scan(&p.Bio, &p.Avatar, &p.Phone, &dob, &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, p, ErrNotFound
	}
	if err != nil {
		return u, p, fmt.Errorf("profile %d: %w", id, err)
	}
	if dob != nil {
		s := dob.Format(time.DateOnly)
		p.DateOfBirth = &s
	}
	return u, p, nil
}

// UsersProjection is the projection that fills users, profiles and the
// registration sources (projections/projectors).
const UsersProjection = "identity.users"
