package pages

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/munnerz/goautoneg"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/buildinfo"
	"github.com/cfgd/cfgd/docs"
)

// Paths served by Mount.
const (
	PathIndex  = "/"
	PathSchema = "/api/schema/"
	PathDocs   = "/api/docs/"
)

// The pages' Content-Security-Policy: nothing but this origin. Swagger UI's
// stylesheet draws its icons as data: SVGs, hence img-src data:.
const (
	cspDocs  = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	cspIndex = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

// FrontConfig names the service in the index.
type FrontConfig struct {
	// Name is shown as the index's name.
	Name string
	// Version and Commit are shown as the index's; DefaultFrontConfig
	// takes them from the binary (deploy/buildinfo).
	Version string
	Commit  string
}

// DefaultFrontConfig is the configuration without overrides.
func DefaultFrontConfig() FrontConfig {
	in := buildinfo.Read()
	return FrontConfig{Name: "cfgd", Version: in.Version, Commit: in.ShortCommit()}
}

// Validate reports every problem at once.
func (c FrontConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("front: Name is empty"))
	}
	if c.Version == "" {
		errs = append(errs, errors.New("front: Version is empty"))
	}
	return errors.Join(errs...)
}

// Link is one entry of the index.
type Link struct {
	Rel   string // key in the JSON answer, such as "extensions"
	Href  string // path on this server
	Title string // shown on the HTML page
}

// links every cfgd server has; Mount's caller adds the admin pages it
// mounted.
func baseLinks() []Link {
	return []Link{
		{Rel: "docs", Href: PathDocs, Title: "API documentation"},
		{Rel: "schema", Href: PathSchema, Title: "OpenAPI schema (YAML)"},
		{Rel: "health", Href: "/healthz", Title: "Liveness"},
		{Rel: "readiness", Href: "/readyz", Title: "Readiness of every dependency"},
		{Rel: "metrics", Href: "/metrics", Title: "Prometheus metrics"},
	}
}

// Index is the JSON answer of GET /.
type Index struct {
	Name    string            `json:"name"`
	Version string            `json:"version"`
	Commit  string            `json:"commit"`
	Links   map[string]string `json:"links"`
	Admin   map[string]string `json:"admin"`
}

// MountFront adds the index, the schema and the docs page to r, and the static
// assets they use (assets may be shared with other pages; mount it once).
// admin lists the staff pages the caller mounted, for the index.
func MountFront(r *mux.Router, cfg FrontConfig, assets *Assets, admin ...Link) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	idx, err := newIndex(cfg, assets, admin)
	if err != nil {
		return err
	}
	page, err := render("docs", docsHTML, map[string]string{
		"Name":   cfg.Name,
		"CSS":    assets.URL("swagger-ui/swagger-ui.css"),
		"Bundle": assets.URL("swagger-ui/swagger-ui-bundle.js"),
		"Init":   assets.URL("cfgd/docs.js"),
		"Schema": PathSchema,
	})
	if err != nil {
		return err
	}
	schema := docs.OpenAPI()
	r.Handle(PathIndex, idx).Methods(http.MethodGet, http.MethodHead).Name("front:index")
	r.Handle(PathSchema, document(schema, "application/yaml; charset=utf-8", "")).
		Methods(http.MethodGet, http.MethodHead).Name("front:schema")
	r.Handle(PathDocs, document(page, "text/html; charset=utf-8", cspDocs)).
		Methods(http.MethodGet, http.MethodHead).Name("front:docs")
	return nil
}

// document serves a fixed body with an ETag, so a reload costs a 304.
func document(body []byte, contentType, csp string) http.Handler {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		if csp != "" {
			h.Set("Content-Security-Policy", csp)
			h.Set("Referrer-Policy", "no-referrer")
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

type index struct {
	json Index
	html []byte
}

func newIndex(cfg FrontConfig, assets *Assets, admin []Link) (*index, error) {
	links := baseLinks()
	idx := &index{json: Index{Name: cfg.Name, Version: cfg.Version, Commit: cmp.Or(cfg.Commit, buildinfo.Unknown), Links: map[string]string{}, Admin: map[string]string{}}}
	seen := map[string]bool{}
	for _, group := range []struct {
		links []Link
		into  map[string]string
	}{{links, idx.json.Links}, {admin, idx.json.Admin}} {
		for _, l := range group.links {
			if l.Rel == "" || l.Href == "" || seen[l.Rel] {
				return nil, fmt.Errorf("front: index link %q (%s) is blank or repeated", l.Rel, l.Href)
			}
			seen[l.Rel] = true
			group.into[l.Rel] = l.Href
		}
	}
	html, err := render("index", indexHTML, map[string]any{
		"Name": cfg.Name, "Version": cfg.Version, "Commit": cmp.Or(cfg.Commit, buildinfo.Unknown), "CSS": assets.URL("cfgd/front.css"), "Links": links, "Admin": admin,
	})
	if err != nil {
		return nil, err
	}
	idx.html = html
	return idx, nil
}

func (i *index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	// JSON is offered first: a client that states no preference (curl, most
	// libraries) gets JSON; a browser, which ranks text/html highest, HTML.
	if goautoneg.Negotiate(r.Header.Get("Accept"), []string{"application/json", "text/html"}) == "text/html" {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", cspIndex)
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(i.html)
		}
		return
	}
	rest.JSON(w, http.StatusOK, i.json)
}

// render executes a page once at start-up; pages change only with the
// binary.
func render(name, text string, data any) ([]byte, error) {
	t, err := template.New(name).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("front: parse %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("front: render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

const (
	docsHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Name}} API</title>
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<div id="swagger-ui" data-url="{{.Schema}}"></div>
<script src="{{.Bundle}}"></script>
<script src="{{.Init}}"></script>
</body>
</html>
`
	indexHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Name}}</title>
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<h1>{{.Name}}</h1>
<p class="version">version {{.Version}} (commit {{.Commit}})</p>
<ul>
{{- range .Links}}
<li><a href="{{.Href}}">{{.Title}}</a> <code>{{.Href}}</code></li>
{{- end}}
</ul>
{{- if .Admin}}
<h2>Administration (staff)</h2>
<ul>
{{- range .Admin}}
<li><a href="{{.Href}}">{{.Title}}</a> <code>{{.Href}}</code></li>
{{- end}}
</ul>
{{- end}}
</body>
</html>
`
)
