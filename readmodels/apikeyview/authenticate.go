package apikeyview

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

// ErrInvalidKey covers an unknown, malformed, revoked or expired key; the
// caller learns nothing more.
var ErrInvalidKey = errors.New("API key is invalid, revoked or expired")

// Owner is who a valid key speaks for.
type Owner struct {
	KeyID   int64
	KeyName string
	KeyType string
	UserID  int64
}

// Config of an Authenticator.
type Config struct {
	// CacheTTL is how long a lookup is reused; it bounds how late a
	// revocation seen by the read model is honoured. At most MaxCacheTTL;
	// 0 disables the cache.
	CacheTTL time.Duration
	// CacheSize bounds the remembered lookups; default 10,000.
	CacheSize int
	Now       func() time.Time
	// CurrentWait bounds how long a check waits, after the start, for
	// api_keys to hold every key event stored before it; default 5s.
	CurrentWait time.Duration
}

// MaxCacheTTL keeps revocations prompt whatever the configuration.
const MaxCacheTTL = time.Second

// Validate joins every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.CacheTTL < 0 || c.CacheTTL > MaxCacheTTL {
		errs = append(errs, fmt.Errorf("apikey: cache TTL must be from 0 to %s, got %s", MaxCacheTTL, c.CacheTTL))
	}
	if c.CurrentWait < 0 {
		errs = append(errs, fmt.Errorf("apikey: current wait must not be negative, got %s", c.CurrentWait))
	}
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("apikey: cache size must not be negative, got %d", c.CacheSize))
	}
	return errors.Join(errs...)
}

// Authenticator checks presented keys against the read model. After a
// start it trusts the read model only once current is: api_keys then holds
// every key created or revoked before the process started (created while
// no serve ran, say, and still in the outbox or an unconsumed partition).
type Authenticator struct {
	db      DB
	cfg     Config
	current *checkpoints.Current

	mu    sync.Mutex
	cache map[string]cached // by key hash
}

type cached struct {
	row     keyRow
	found   bool
	fetched time.Time
}

type keyRow struct {
	owner     Owner
	hash      string
	active    bool
	expiresAt *time.Time
}

// NewAuthenticator returns an Authenticator.
func NewAuthenticator(db DB, cfg Config) (*Authenticator, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10_000
	}
	if cfg.CurrentWait == 0 {
		cfg.CurrentWait = 5 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Authenticator{db: db, cfg: cfg, cache: map[string]cached{},
		current: checkpoints.NewCurrent(db, KeysProjection, KeyTypes()...)}, nil
}

// KeyTypes are the event types of KeysProjection.
func KeyTypes() []string { return []string{apikey.Created{}.EventType(), apikey.Revoked{}.EventType()} }

// Ready fails until api_keys is current as of the start.
func (a *Authenticator) Ready(ctx context.Context) error { return a.current.Check(ctx) }

// MaxKeyLength bounds what is hashed; real keys are 48 characters.
const MaxKeyLength = 256

// Authenticate returns the owner of a valid key, ErrInvalidKey for any
// other string, or an error of the read model.
func (a *Authenticator) Authenticate(ctx context.Context, raw string) (Owner, error) {
	if !strings.HasPrefix(raw, apikey.Prefix) || len(raw) > MaxKeyLength {
		return Owner{}, ErrInvalidKey
	}
	if err := a.current.Wait(ctx, a.cfg.CurrentWait); err != nil {
		return Owner{}, fmt.Errorf("API keys: %w", err)
	}
	hash := apikey.Hash(raw)
	row, found, err := a.lookup(ctx, hash)
	if err != nil {
		return Owner{}, err
	}
	// The index found the row by hash; the comparison in constant time
	// keeps that the only place where the stored hash meets the presented one.
	if !found || subtle.ConstantTimeCompare([]byte(row.hash), []byte(hash)) != 1 || !row.active {
		return Owner{}, ErrInvalidKey
	}
	if row.expiresAt != nil && !row.expiresAt.After(a.cfg.Now()) {
		return Owner{}, ErrInvalidKey
	}
	return row.owner, nil
}

func (a *Authenticator) lookup(ctx context.Context, hash string) (keyRow, bool, error) {
	now := a.cfg.Now()
	if a.cfg.CacheTTL > 0 {
		a.mu.Lock()
		c, ok := a.cache[hash]
		a.mu.Unlock()
		if ok && now.Sub(c.fetched) < a.cfg.CacheTTL && now.Sub(c.fetched) >= 0 {
			return c.row, c.found, nil
		}
	}
	var r keyRow
	err := a.db.QueryRow(ctx, `SELECT id, name, key_type, user_id, key_hash, is_active, expires_at FROM api_keys WHERE key_hash = $1`, hash).
		Scan(&r.owner.KeyID, &r.owner.KeyName, &r.owner.KeyType, &r.owner.UserID, &r.hash, &r.active, &r.expiresAt)
	found := true
	if errors.Is(err, pgx.ErrNoRows) {
		found, err = false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("API key lookup: %w", err)
	}
	if a.cfg.CacheTTL > 0 {
		a.mu.Lock()
		if len(a.cache) >= a.cfg.CacheSize {
			// Dropping everything is crude but bounded, and at most one
			// TTL's worth of lookups is lost.
			clear(a.cache)
		}
		a.cache[hash] = cached{row: r, found: found, fetched: now}
		a.mu.Unlock()
	}
	return r, found, nil
}
