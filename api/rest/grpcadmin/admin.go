package grpcadmin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
	"github.com/cfgd/cfgd/readmodels/checkpoints"
)

func mountAdmin(r *mux.Router, h *handler) {
	r.Handle(PathAdminCreate, h.Staff(http.HandlerFunc(h.createKey))).Methods(http.MethodPost).Name("admin:api-key-create")
	r.Handle(PathAdminRevoke, h.Staff(http.HandlerFunc(h.revokeKey))).Methods(http.MethodPost).Name("admin:api-key-revoke")
}

// CreateRequest is the body of POST /admin/api-keys/.
type CreateRequest struct {
	Name      string     `json:"name"`
	KeyType   string     `json:"key_type"`
	UserEmail string     `json:"user_email"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// CreateResponse shows the full key, this once.
type CreateResponse struct {
	Success bool           `json:"success"`
	Key     string         `json:"key"`
	APIKey  apikeyview.Key `json:"api_key"`
	Message string         `json:"message"`
}

func actor(r *http.Request) string {
	if p, ok := auth.PrincipalFrom(r.Context()); ok && p.User != nil {
		return p.User.Email
	}
	return "admin"
}

func (h *handler) createKey(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if !rest.DecodeOr400(w, r, &req) {
		return
	}
	by := actor(r)
	c, err := h.Create.Handle(r.Context(), apikeys.Create{
		Name: req.Name, KeyType: req.KeyType, UserEmail: req.UserEmail, ExpiresAt: req.ExpiresAt, CreatedBy: by,
		Meta: events.Metadata{CorrelationID: rest.RequestID(r.Context()), Actor: by},
	})
	switch {
	case errors.Is(err, apikeys.ErrUnknownUser):
		rest.WriteError(w, errcode.Fields(map[string]string{"user_email": err.Error()}))
		return
	case err != nil:
		rest.Fail(w, r, err)
		return
	}
	// The answer holds the full key: no cache, shared or private, keeps it.
	rest.NoStore(w)
	rest.JSON(w, http.StatusCreated, CreateResponse{
		Success: true, Key: c.Key, APIKey: h.readBack(r.Context(), c.State),
		Message: "Store the key now: it is shown only once.",
	})
}

// readBack returns the key as the read model shows it once the projection
// has it, so the next list includes it; if the projection is slow, the
// command's own state answers.
func (h *handler) readBack(ctx context.Context, s *apikeys.State) apikeyview.Key {
	wctx, cancel := context.WithTimeout(ctx, h.ReadWait)
	defer cancel()
	if err := checkpoints.Wait(wctx, h.Pool, apikeyview.KeysProjection, apikey.Stream(s.ID), s.Version); err == nil {
		if k, err := h.Keys.Get(ctx, s.ID); err == nil {
			return k
		}
	}
	k := apikeyview.Key{
		ID: s.ID, Name: s.Name, KeyType: s.KeyType, MaskedKey: s.MaskedKey, IsActive: !s.Revoked,
		UserID: s.UserID, Username: s.UserEmail, UserEmail: s.UserEmail, ExpiresAt: s.ExpiresAt,
		CreatedAt: s.CreatedAt, CreatedBy: s.CreatedBy,
	}
	k.IsValid = k.IsActive && (k.ExpiresAt == nil || k.ExpiresAt.After(time.Now()))
	return k
}

func (h *handler) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	by := actor(r)
	s, err := h.Revoke.Handle(r.Context(), apikeys.Revoke{
		ID: id, RevokedBy: by, Meta: events.Metadata{CorrelationID: rest.RequestID(r.Context()), Actor: by},
	})
	if errors.Is(err, apikeys.ErrNotFound) {
		rest.WriteError(w, errcode.New(errcode.NotFound, "API key not found"))
		return
	}
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, map[string]any{"success": true, "api_key": h.readBack(r.Context(), s)})
}
