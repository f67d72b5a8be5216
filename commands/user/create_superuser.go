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

// CreateSuperuser creates a staff superuser, with a password or without one
// (such a user signs in by OTP only).
type CreateSuperuser struct {
	Email    string
	Password string
	Meta     events.Metadata
}

// ErrPasswordTooShort rejects a password under MinPasswordLength.
var ErrPasswordTooShort = fmt.Errorf("the password must be at least %d characters", MinPasswordLength)

// CreateSuperuserHandler handles CreateSuperuser.
type CreateSuperuserHandler struct {
	pool store.DB
	now  func() time.Time
}

// NewCreateSuperuserHandler returns the handler.
func NewCreateSuperuserHandler(pool store.DB, now func() time.Time) *CreateSuperuserHandler {
	return &CreateSuperuserHandler{pool: pool, now: now}
}

// Check validates cmd without touching the store; Handle runs it too.
func (cmd CreateSuperuser) Check() (email string, err error) {
	if email, err = identity.NormaliseEmail(cmd.Email); err != nil {
		return "", err
	}
	if cmd.Password != "" && len([]rune(cmd.Password)) < MinPasswordLength {
		return "", ErrPasswordTooShort
	}
	return email, nil
}

// Handle creates the user. It fails with identity.ErrEmailRequired (the
// spec's 'Email is required'), identity.ErrInvalidEmail,
// ErrPasswordTooShort or ErrEmailTaken.
func (h *CreateSuperuserHandler) Handle(ctx context.Context, cmd CreateSuperuser) (*State, error) {
	email, err := cmd.Check()
	if err != nil {
		return nil, err
	}
	var hash string
	if cmd.Password != "" {
		if hash, err = HashPassword(cmd.Password); err != nil {
			return nil, err
		}
	}
	return commands.Execute(ctx, h.pool, "create superuser",
		func(ctx context.Context) (*State, error) { return Lookup(ctx, h.pool, email) },
		func(ctx context.Context, existing *State) (commands.Decision[*State], error) {
			if existing != nil {
				return commands.Decision[*State]{}, ErrEmailTaken
			}
			id, err := NextID(ctx, h.pool)
			if err != nil {
				return commands.Decision[*State]{}, err
			}
			writes, created, err := Register(id, New{
				Email: email, PasswordHash: hash, IsStaff: true, IsSuperuser: true, Via: identity.ViaCommand,
			}, cmd.Meta, h.now())
			if err != nil {
				return commands.Decision[*State]{}, err
			}
			return commands.Decision[*State]{Writes: writes, Result: created}, nil
		})
}

// IsInputError tells whether err is the caller's mistake rather than a
// failure of the service.
func IsInputError(err error) bool {
	return errors.Is(err, identity.ErrEmailRequired) || errors.Is(err, identity.ErrInvalidEmail) ||
		errors.Is(err, ErrPasswordTooShort) || errors.Is(err, ErrEmailTaken)
}
