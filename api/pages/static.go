package pages

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
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
	fsys  fs.FS
	files map[string]*asset
}

type asset struct {
	hash string // hex sha256 prefix: the version and the ETag
	// gz is the gzip encoding of a text asset, made on its first request
	// (the docs bundle shrinks from 1.7 MB to 0.46 MB) rather than
	// at start-up, which every test router would pay for.
	gzOnce sync.Once
	gz     []byte
}

// New indexes the embedded assets.
func NewAssets() (*Assets, error) {
	sub, err := fs.Sub(embedded, "assets")
	if err != nil {
		return nil, fmt.Errorf("static assets: %w", err)
	}
	return newAssets(sub)
}

func newAssets(fsys fs.FS) (*Assets, error) {
	a := &Assets{fsys: fsys, files: map[string]*asset{}}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a.files[name] = &asset{hash: hex.EncodeToString(sum[:8])}
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
	f, ok := a.files[name]
	if !ok {
		panic("static: no embedded asset " + name)
	}
	return Prefix + name + "?" + versionParameter + "=" + f.hash
}

// Mount serves the assets under Prefix (GET and HEAD).
func (a *Assets) Mount(r *mux.Router) {
	r.Handle(Prefix+"{asset:.+}", a).Methods(http.MethodGet, http.MethodHead).Name("static")
}

// ServeHTTP answers one asset, gzip-encoded when it is text and the client
// accepts that; directories and unknown names are 404s.
func (a *Assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	as, ok := a.files[name]
	if !ok {
		rest.WriteError(w, errcode.New(errcode.NotFound, "no such asset"))
		return
	}
	ct := contentType(path.Ext(name))
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", ct)
	if q.Get(versionParameter) == as.hash {
		h.Set("Cache-Control", cacheImmutable)
	} else {
		h.Set("Cache-Control", cacheRevalidate)
	}
	compressible := strings.HasPrefix(ct, "text/") || ct == "application/json" || ct == "image/svg+xml"
	if compressible {
		h.Add("Vary", "Accept-Encoding")
	}
	if compressible && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		gz, err := a.gzipped(name, as)
		if err != nil {
			rest.Fail(w, r, err)
			return
		}
		// Each encoding is its own representation, with its own ETag.
		h.Set("ETag", `"`+as.hash+`-gz"`)
		h.Set("Content-Encoding", "gzip")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(gz))
		return
	}
	f, err := a.fsys.Open(name)
	if err != nil {
		rest.Fail(w, r, fmt.Errorf("static asset %s: %w", name, err))
		return
	}
	defer f.Close()
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		rest.Fail(w, r, fmt.Errorf("static asset %s cannot seek", name))
		return
	}
	h.Set("ETag", `"`+as.hash+`"`)
	// ServeContent handles ranges, HEAD and If-None-Match against the ETag
	// set above. Embedded files carry no modification time.
	http.ServeContent(w, r, name, time.Time{}, rs)
}

func (a *Assets) gzipped(name string, as *asset) ([]byte, error) {
	var err error
	as.gzOnce.Do(func() {
		var raw []byte
		if raw, err = fs.ReadFile(a.fsys, name); err != nil {
			return
		}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.DefaultCompression) // best saves 0.4% for twice the time
		if _, err = zw.Write(raw); err != nil {
			return
		}
		if err = zw.Close(); err != nil {
			return
		}
		as.gz = b.Bytes()
	})
	if err == nil && as.gz == nil {
		err = fmt.Errorf("static asset %s: compression failed earlier", name)
	}
	return as.gz, err
}

// acceptsGzip reads an Accept-Encoding header: gzip (or *) listed without
// q=0.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
		if !ok {
			return true
		}
		if v, err := strconv.ParseFloat(q, 64); err == nil && v > 0 {
			return true
		}
	}
	return false
}
