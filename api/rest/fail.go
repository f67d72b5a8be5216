package rest

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events/store"
)

// StatusClientClosed is logged (never seen by anyone) when the client left
// before the answer.
const StatusClientClosed = 499

// Fail answers an error no handler expected: 503 when a dependency is down
// or too busy, nothing useful when the client has gone, else 500.
func Fail(w http.ResponseWriter, r *http.Request, err error) {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	var tooLarge *store.TooLargeError
	switch {
	case r.Context().Err() != nil:
		Error(w, StatusClientClosed, "client_closed", "client closed the request")
	case errors.As(err, &tooLarge):
		// What was sent would make an event larger than the bus carries.
		Error(w, http.StatusRequestEntityTooLarge, "too_large", "the request would record more data than cfgd accepts in one event")
	case errors.Is(err, commands.ErrBusy):
		w.Header().Set("Retry-After", "1")
		Error(w, http.StatusServiceUnavailable, "busy", "too much concurrent activity, try again")
	case errors.As(err, &connErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrClosed):
		Unavailable(w, r, "a backing service", err)
	default:
		Internal(w, r, err)
	}
}
