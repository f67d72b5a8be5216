package grpc

import (
	"errors"
	"net/http"

	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/web"
	rmapikey "github.com/cfgd/cfgd/readmodels/apikey"
)

// HeaderAPIKey carries an API key on the proto-file endpoints, as in gRPC
// metadata.
const HeaderAPIKey = "X-API-Key"

// staffOrKey lets through a request with a valid API key in X-API-Key,
// and otherwise hands it to the staff middleware (session, Basic or
// Bearer, with its CSRF check). A key that is present but wrong is a 401:
// the caller meant to use it.
func (h *handler) staffOrKey(next http.Handler) http.Handler {
	staff := h.Staff(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get(HeaderAPIKey)
		if raw == "" {
			staff.ServeHTTP(w, r)
			return
		}
		_, err := h.KeyAuth.Authenticate(r.Context(), raw)
		switch {
		case errors.Is(err, rmapikey.ErrInvalidKey):
			w.Header().Set("WWW-Authenticate", `APIKey realm="cfgd"`)
			web.Error(w, http.StatusUnauthorized, "invalid_api_key", "API key is invalid, revoked or expired")
		case err != nil:
			auth.Fail(w, r, err)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
