package projectors

import (
	"context"
	"fmt"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// KeysName of the projection.
const KeysName = apikeyview.KeysProjection

// APIKeys returns every API key projection.
func APIKeys() []*projections.Projection { return []*projections.Projection{Keys()} }

// Keys builds api_keys.
func Keys() *projections.Projection {
	p := projections.New(KeysName, "api_keys")
	projections.On(p, func(ctx context.Context, tx projections.Tx, _ events.Envelope, e *apikey.Created) error {
		err := tx.Exec(ctx, `
			INSERT INTO api_keys (id, name, key_type, key_hash, masked_key, user_id, user_email, expires_at, created_at, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.KeyID, e.Name, e.KeyType, e.KeyHash, e.MaskedKey, e.UserID, e.UserEmail, e.ExpiresAt, e.CreatedAt, e.CreatedBy)
		if err != nil {
			return fmt.Errorf("insert API key %d: %w", e.KeyID, err)
		}
		return nil
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, _ events.Envelope, e *apikey.Revoked) error {
		if err := tx.Exec(ctx, `UPDATE api_keys SET is_active = false, revoked_at = $2 WHERE id = $1`, e.KeyID, e.At); err != nil {
			return fmt.Errorf("revoke API key %d: %w", e.KeyID, err)
		}
		return nil
	})
	return p
}
