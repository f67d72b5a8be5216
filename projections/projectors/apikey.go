package projectors

import (
	"context"

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
		return apikeyview.InsertKey(ctx, tx, apikeyview.NewKey{ID: e.KeyID, Name: e.Name, KeyType: e.KeyType, KeyHash: e.KeyHash,
			MaskedKey: e.MaskedKey, UserID: e.UserID, UserEmail: e.UserEmail, ExpiresAt: e.ExpiresAt, CreatedAt: e.CreatedAt, CreatedBy: e.CreatedBy})
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, _ events.Envelope, e *apikey.Revoked) error {
		return apikeyview.RevokeKey(ctx, tx, e.KeyID, e.At)
	})
	return p
}
