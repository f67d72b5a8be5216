package tasks

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"

	"github.com/gorilla/mux"
)

// Dashboard paths.
const (
	PathDashboard = "/admin/tasks/dashboard/"
	PathStatic    = "/admin/tasks/static/"
)

// The page is plain HTML, CSS and JavaScript, served from the binary: no
// CDN, no build step.
//
//go:embed dashboard
var dashboardFS embed.FS

// MountDashboard adds the dashboard page (staff; a sign-in form for anyone
// not signed in) and its assets.
func MountDashboard(r *mux.Router, staff mux.MiddlewareFunc) error {
	assets, err := fs.Sub(dashboardFS, "dashboard")
	if err != nil {
		return err
	}
	page, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		return err
	}
	login, err := fs.ReadFile(assets, "login.html")
	if err != nil {
		return err
	}
	static := http.StripPrefix(PathStatic, http.FileServerFS(assets))
	r.PathPrefix(PathStatic).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	})).Methods(http.MethodGet, http.MethodHead).Name("tasks:static")
	r.Handle(PathDashboard, pageHandler(staff, page, login)).Methods(http.MethodGet, http.MethodHead).Name("tasks:dashboard")
	return nil
}

// pageHandler serves page to staff. Anyone the staff check turns away as
// not signed in (401) gets the sign-in form instead of a JSON error; other
// refusals (403) are passed on as they are.
func pageHandler(staff mux.MiddlewareFunc, page, login []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed := false
		probe := staff(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true }))
		rec := &recorder{header: http.Header{}}
		probe.ServeHTTP(rec, r)
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		switch {
		case passed:
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(page)
		case rec.status == http.StatusUnauthorized:
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(login)
		default:
			for k, v := range rec.header {
				h[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		}
	})
}

// recorder keeps the staff check's refusal to relay or replace it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) { r.status = s }
