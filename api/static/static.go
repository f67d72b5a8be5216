// Package static serves the files embedded in the binary that cfgd's pages
// for people use (the API docs now; the task dashboard and the gRPC
// monitoring page next). Third-party assets are vendored from npm under
// assets/<package>/ with a README naming the version and licence; cfgd's
// own scripts and stylesheets are under assets/cfgd/. Nothing is loaded
// from a CDN, so the pages work offline and a Content-Security-Policy of
// 'self' holds.
//
// A page links an asset with Assets.URL, which adds the content hash as a
// query: a request carrying the current hash is cached for a year
// (immutable), any other is revalidated with the ETag. An upgrade thus
// never leaves a browser with a stale script.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/web"
)

//go:embed assets
var embedded embed.FS

// Prefix is the URL path the assets are served under.
const Prefix = "/static/"

// Cache-Control values: a versioned URL never changes; an unversioned one
// must be checked with the server each time (cheap: a 304 by ETag).
const (
	cacheImmutable   = "public, max-age=31536000, immutable"
	cacheRevalidate  = "no-cache"
	versionParameter = "v"
)

// contentType is fixed here rather than taken from mime.TypeByExtension,
// which reads the machine's mime.types and could answer differently on
// another host; with nosniff, a wrong type would break the page.
func contentType(ext string) string {
	switch ext {
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".json":
		return "application/json"
	case ".html":
		return "text/html; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	case ".woff2":
		return "font/woff2"
	case ".txt", ".md":
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}

// Assets is the embedded file set with each file's content hash.
type Assets struct {
	fsys   fs.FS
	hashes map[string]string // name -> hex sha256 prefix
}

// New indexes the embedded assets.
func New() (*Assets, error) {
	sub, err := fs.Sub(embedded, "assets")
	if err != nil {
		return nil, fmt.Errorf("static assets: %w", err)
	}
	return newAssets(sub)
}

func newAssets(fsys fs.FS) (*Assets, error) {
	a := &Assets{fsys: fsys, hashes: map[string]string{}}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a.hashes[name] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("static assets: %w", err)
	}
	return a, nil
}

// URL is the versioned address of asset name (such as
// "swagger-ui/swagger-ui.css"). It panics on a name that is not embedded:
// that is a programming error a page's first test catches.
func (a *Assets) URL(name string) string {
	h, ok := a.hashes[name]
	if !ok {
		panic("static: no embedded asset " + name)
	}
	return Prefix + name + "?" + versionParameter + "=" + h
}

// Mount serves the assets under Prefix (GET and HEAD).
func (a *Assets) Mount(r *mux.Router) {
	r.Handle(Prefix+"{asset:.+}", a).Methods(http.MethodGet, http.MethodHead).Name("static")
}

// ServeHTTP answers one asset; directories and unknown names are 404s.
func (a *Assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	hash, ok := a.hashes[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	f, err := a.fsys.Open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", contentType(path.Ext(name)))
	h.Set("ETag", `"`+hash+`"`)
	if r.URL.Query().Get(versionParameter) == hash {
		h.Set("Cache-Control", cacheImmutable)
	} else {
		h.Set("Cache-Control", cacheRevalidate)
	}
	// embed files implement io.ReadSeeker; ServeContent handles ranges,
	// HEAD and If-None-Match against the ETag set above. Embedded files
	// carry no modification time.
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		web.Internal(w, r, fmt.Errorf("static asset %s cannot seek", name))
		return
	}
	http.ServeContent(w, r, name, time.Time{}, rs)
}
