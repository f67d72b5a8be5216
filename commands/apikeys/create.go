package apikeys

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// MaxNameLength bounds a key's name.
const MaxNameLength = 100

// Create makes a key for the user with address UserEmail.
type Create struct {
	Name      string
	KeyType   string
	UserEmail string
	ExpiresAt *time.Time // nil: never
	CreatedBy string     // who asked: an admin's address, or "cli"
	Meta      events.Metadata
}

// Created is a new key. Key is the full key: it exists only here, to be
// shown once; nothing stores it.
type Created struct {
	Key   string
	State *State
}

// ErrUnknownUser is returned when no active user has the owner's address.
var ErrUnknownUser = errors.New("no active user with this e-mail address")

// CreateHandler handles Create.
type CreateHandler struct {
	pool store.DB
	now  func() time.Time
}

// NewCreateHandler returns the handler.
func NewCreateHandler(pool store.DB, now func() time.Time) *CreateHandler {
	return &CreateHandler{pool: pool, now: now}
}

// Check validates cmd without touching the store and returns the
// normalised owner address; Handle runs it too. The error is a
// field error (errcode.Invalid) naming each bad field.
func (cmd Create) Check(now time.Time) (string, error) {
	fields := map[string]string{}
	name := strings.TrimSpace(cmd.Name)
	switch {
	case name == "":
		fields["name"] = "is required"
	case !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxNameLength:
		fields["name"] = fmt.Sprintf("must be at most %d characters", MaxNameLength)
	}
	if !apikey.ValidType(cmd.KeyType) {
		fields["key_type"] = "must be one of " + strings.Join(apikey.Types(), ", ")
	}
	email, err := identity.NormaliseEmail(cmd.UserEmail)
	if err != nil {
		fields["user_email"] = err.Error()
	}
	if cmd.ExpiresAt != nil && !cmd.ExpiresAt.After(now) {
		fields["expires_at"] = "must be in the future"
	}
	if len(fields) > 0 {
		return "", errcode.Fields(fields)
	}
	return email, nil
}

// Handle creates the key. It fails with a field error (errcode.Invalid) or
// ErrUnknownUser for bad input.
func (h *CreateHandler) Handle(ctx context.Context, cmd Create) (Created, error) {
	now := h.now()
	email, err := cmd.Check(now)
	if err != nil {
		return Created{}, err
	}
	owner, err := user.Lookup(ctx, h.pool, email)
	if err != nil {
		return Created{}, err
	}
	if owner == nil || !owner.IsActive {
		return Created{}, ErrUnknownUser
	}
	raw, err := Generate()
	if err != nil {
		return Created{}, err
	}
	var id int64
	if err := h.pool.QueryRow(ctx, `SELECT nextval('api_key_ids')`).Scan(&id); err != nil {
		return Created{}, fmt.Errorf("next API key id: %w", err)
	}
	var exp *time.Time
	if cmd.ExpiresAt != nil {
		t := cmd.ExpiresAt.UTC()
		exp = &t
	}
	stream := apikey.Stream(id)
	env, err := events.New(stream, apikey.Created{
		KeyID: id, Name: strings.TrimSpace(cmd.Name), KeyType: cmd.KeyType, KeyHash: apikey.Hash(raw), MaskedKey: apikey.Mask(raw),
		UserID: owner.ID, UserEmail: owner.Email, CreatedBy: cmd.CreatedBy, CreatedAt: now.UTC(), ExpiresAt: exp,
	}, cmd.Meta, now)
	if err != nil {
		return Created{}, err
	}
	// A fresh id's stream cannot exist, so there is no race to retry.
	stored, err := store.Append(ctx, h.pool, stream, events.NoStream, env)
	if err != nil {
		return Created{}, fmt.Errorf("create API key: %w", err)
	}
	s, err := Fold(stored)
	if err != nil {
		return Created{}, err
	}
	return Created{Key: raw, State: s}, nil
}

// Generate returns a new full key: the prefix and 256 random bits.
func Generate() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("API key: random: %w", err)
	}
	return apikey.Prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// IsInputError tells whether err is the caller's mistake.
func IsInputError(err error) bool {
	var v *errcode.Error
	return errors.As(err, &v) && v.Code == errcode.Invalid || errors.Is(err, ErrUnknownUser) || errors.Is(err, ErrNotFound)
}
