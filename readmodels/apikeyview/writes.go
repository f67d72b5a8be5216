package apikeyview

import (
	"context"
	"fmt"
	"time"
)

// Execer runs one write statement; the projection runner's transaction
// (projections.Tx) satisfies it. InsertKey and RevokeKey are the only
// statements that change a key's own columns: the projection calls them
// and holds no SQL (the usage columns move through ApplyUsage).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) error
}

// NewKey is a created key, as the projection inserts it.
type NewKey struct {
	ID        int64
	Name      string
	KeyType   string
	KeyHash   string
	MaskedKey string
	UserID    int64
	UserEmail string
	ExpiresAt *time.Time
	CreatedAt time.Time
	CreatedBy string
}

const insertKey = `
	INSERT INTO api_keys (id, name, key_type, key_hash, masked_key, user_id, user_email, expires_at, created_at, created_by)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// InsertKey inserts k, active and unused.
func InsertKey(ctx context.Context, tx Execer, k NewKey) error {
	if err := tx.Exec(ctx, insertKey, k.ID, k.Name, k.KeyType, k.KeyHash, k.MaskedKey, k.UserID, k.UserEmail, k.ExpiresAt, k.CreatedAt, k.CreatedBy); err != nil {
		return fmt.Errorf("insert API key %d: %w", k.ID, err)
	}
	return nil
}

// RevokeKey marks key id revoked at at.
func RevokeKey(ctx context.Context, tx Execer, id int64, at time.Time) error {
	if err := tx.Exec(ctx, `UPDATE api_keys SET is_active = false, revoked_at = $2 WHERE id = $1`, id, at); err != nil {
		return fmt.Errorf("revoke API key %d: %w", id, err)
	}
	return nil
}
