package taskadmin

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// PathAsynqmon is asynqmon's own UI, a read-only deep view beside the
// dashboard.
const PathAsynqmon = "/admin/tasks/asynqmon/"

// MountAsynqmon serves asynqmon (its UI embedded) under PathAsynqmon
// behind staff, read-only: asynqmon's own ReadOnly mode, and anything but
// GET and HEAD refused here too, so that every change to a queue stays a
// cfgd command and an event. The closer releases its Redis connections.
func MountAsynqmon(r *mux.Router, staff mux.MiddlewareFunc, redisURL string) (io.Closer, error) {
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, fmt.Errorf("asynqmon: TASKS__REDIS_URL: %w", config.RedactError(err, redisURL))
	}
	h := asynqmon.New(asynqmon.Options{RootPath: strings.TrimSuffix(PathAsynqmon, "/"), RedisConnOpt: opt, ReadOnly: true})
	r.PathPrefix(PathAsynqmon).Handler(staff(readOnly(h))).Name("tasks:asynqmon")
	return h, nil
}

// readOnly answers 405 to anything but GET and HEAD.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			rest.WriteError(w, errcode.New(errcode.MethodNotAllowed, "asynqmon is read-only here; change queues and tasks on the task dashboard or with cfgd task"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
