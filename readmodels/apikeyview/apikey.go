package apikeyview

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/events/apikey"
)

// DB is what the queries need; *pgxpool.Pool satisfies it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Key is one row of the read model, in the shape of docs/api.md#api-keys.
type Key struct {
	ID           int64      `json:"id"`
	Name         string     `json:"name"`
	KeyType      string     `json:"key_type"`
	MaskedKey    string     `json:"masked_key"`
	IsActive     bool       `json:"is_active"`
	IsValid      bool       `json:"is_valid"`
	UserID       int64      `json:"user_id"`
	Username     string     `json:"username"` // users sign in by address: it is the e-mail
	UserEmail    string     `json:"user_email"`
	RequestCount int64      `json:"request_count"`
	LastUsedAt   *time.Time `json:"last_used_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	CreatedAt    time.Time  `json:"created_at"`
	CreatedBy    string     `json:"created_by"`
}

// ErrNotFound is returned for an unknown key id.
var ErrNotFound = errors.New("API key not found")

// Keys queries the read model.
type Keys struct {
	db  DB
	now func() time.Time
}

// NewKeys returns the query object.
func NewKeys(db DB, now func() time.Time) *Keys {
	if now == nil {
		now = time.Now
	}
	return &Keys{db: db, now: now}
}

const selectKey = `SELECT id, name, key_type, masked_key, is_active, user_id, user_email, request_count, last_used_at, expires_at, created_at, created_by FROM api_keys`

func (q *Keys) scan(row pgx.Row) (Key, error) {
	var k Key
	if err := row.Scan(&k.ID, &k.Name, &k.KeyType, &k.MaskedKey, &k.IsActive, &k.UserID, &k.UserEmail,
		&k.RequestCount, &k.LastUsedAt, &k.ExpiresAt, &k.CreatedAt, &k.CreatedBy); err != nil {
		return k, err
	}
	k.Username = k.UserEmail
	k.CreatedAt = k.CreatedAt.UTC()
	for _, t := range []*time.Time{k.ExpiresAt, k.LastUsedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	k.IsValid = k.IsActive && (k.ExpiresAt == nil || k.ExpiresAt.After(q.now()))
	return k, nil
}

// Filter narrows a list; nil fields do not filter.
type Filter struct {
	IsActive *bool
	KeyType  string
	UserID   *int64
}

// Paging limits.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Page selects one page of a list, 1-based.
type Page struct {
	Number int
	Size   int
}

// List returns one page of keys matching f, newest first, and how many
// match in all.
func (q *Keys) List(ctx context.Context, f Filter, p Page) ([]Key, int64, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.IsActive != nil {
		add("is_active = ?", *f.IsActive)
	}
	if f.KeyType != "" {
		add("key_type = ?", f.KeyType)
	}
	if f.UserID != nil {
		add("user_id = ?", *f.UserID)
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var count int64
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM api_keys`+cond, args...).Scan(&count); err != nil {
		return nil, 0, fmt.Errorf("count API keys: %w", err)
	}
	args = append(args, p.Size, (p.Number-1)*p.Size)
	rows, err := q.db.Query(ctx, selectKey+cond+fmt.Sprintf(` ORDER BY id DESC LIMIT $%d OFFSET $%d`, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list API keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return q.scan(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("list API keys: %w", err)
	}
	if out == nil {
		out = []Key{}
	}
	return out, count, nil
}

// Get returns key id.
func (q *Keys) Get(ctx context.Context, id int64) (Key, error) {
	k, err := q.scan(q.db.QueryRow(ctx, selectKey+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("API key %d: %w", id, err)
	}
	return k, nil
}

// Stats summarises every key.
type Stats struct {
	TotalKeys     int64            `json:"total_keys"`
	ActiveKeys    int64            `json:"active_keys"`
	ExpiredKeys   int64            `json:"expired_keys"`
	TotalRequests int64            `json:"total_requests"`
	KeysByType    map[string]int64 `json:"keys_by_type"`
}

// Stats counts keys: active means not revoked, expired means past its
// expiry (revoked or not); every key type appears in KeysByType.
func (q *Keys) Stats(ctx context.Context) (Stats, error) {
	s := Stats{KeysByType: map[string]int64{}}
	for _, t := range apikey.Types() {
		s.KeysByType[t] = 0
	}
	rows, err := q.db.Query(ctx, keyStats, q.now())
	if err != nil {
		return s, fmt.Errorf("API key stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			typ                          string
			total, active, expired, reqs int64
		)
		if err := rows.Scan(&typ, &total, &active, &expired, &reqs); err != nil {
			return s, fmt.Errorf("API key stats: %w", err)
		}
		s.KeysByType[typ] = total
		s.TotalKeys += total
		s.ActiveKeys += active
		s.ExpiredKeys += expired
		s.TotalRequests += reqs
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("API key stats: %w", err)
	}
	return s, nil
}

// keyStats counts keys per type; $1 is now.
const keyStats = `
	SELECT key_type, count(*), count(*) FILTER (WHERE is_active),
	count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= $1), coalesce(sum(request_count), 0)::bigint
	FROM api_keys GROUP BY key_type`

// KeysProjection is the projection that fills api_keys
// (projections/projectors).
const KeysProjection = "apikey.keys"
