package pages

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/docs"
)

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	r := mux.NewRouter()
	assets, err := NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	assets.Mount(r)
	err = MountFront(r, FrontConfig{Name: "cfgd", Version: "v1.2.3"}, assets,
		Link{Rel: "extensions", Href: "/cfg/extensions/", Title: "Installed extensions"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}
}

func TestIndexNegotiatesJSONOrHTML(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	tests := []struct {
		name   string
		accept string
		html   bool
	}{
		{"no Accept", "", false},
		{"anything", "*/*", false},
		{"JSON", "application/json", false},
		{"browser", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", true},
		{"JSON preferred", "application/json, text/html;q=0.5", false},
		{"HTML only", "text/html", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.accept != "" {
				hdr = []string{"Accept", tc.accept}
			}
			a := get(t, srv.URL+"/", hdr...)
			if a.status != http.StatusOK || !strings.Contains(a.header.Get("Vary"), "Accept") {
				t.Fatalf("%d %v", a.status, a.header)
			}
			if tc.html {
				if a.header.Get("Content-Type") != "text/html; charset=utf-8" || a.header.Get("Content-Security-Policy") == "" ||
					!strings.Contains(a.body, `<a href="/api/docs/">`) || !strings.Contains(a.body, `<a href="/cfg/extensions/">`) ||
					!strings.Contains(a.body, "v1.2.3") {
					t.Fatalf("html: %v\n%s", a.header, a.body)
				}
				return
			}
			var idx Index
			if a.header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(a.body), &idx) != nil {
				t.Fatalf("json: %v %s", a.header, a.body)
			}
			want := map[string]string{"docs": "/api/docs/", "schema": "/api/schema/", "health": "/healthz", "readiness": "/readyz", "metrics": "/metrics"}
			for k, v := range want {
				if idx.Links[k] != v {
					t.Errorf("links[%s] = %q, want %q", k, idx.Links[k], v)
				}
			}
			if idx.Name != "cfgd" || idx.Version != "v1.2.3" || idx.Admin["extensions"] != "/cfg/extensions/" {
				t.Errorf("index: %s", a.body)
			}
		})
	}
}

// The served schema is the repository's file, and it is a valid OpenAPI
// 3.1 document that describes the front door itself.
func TestSchemaIsTheValidOpenAPIDocument(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	a := get(t, srv.URL+PathSchema)
	if a.status != http.StatusOK || a.header.Get("Content-Type") != "application/yaml; charset=utf-8" || a.body != string(docs.OpenAPI()) {
		t.Fatalf("%d %v %.100s", a.status, a.header, a.body)
	}
	if etag := a.header.Get("ETag"); etag == "" || get(t, srv.URL+PathSchema, "If-None-Match", etag).status != http.StatusNotModified {
		t.Errorf("no 304 for ETag %q", etag)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData([]byte(a.body))
	if err != nil {
		t.Fatalf("schema does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("schema is not valid OpenAPI: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	for _, p := range []string{"/", PathSchema, PathDocs, "/static/{asset}", "/media/{file}", "/api/profile/avatar/"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("schema does not describe %s", p)
		}
	}
}

// The docs page loads only assets of this server, each served with the
// content type a browser needs under nosniff, and cacheable for good.
func TestDocsPageAndItsAssets(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	a := get(t, srv.URL+PathDocs)
	if a.status != http.StatusOK || a.header.Get("Content-Type") != "text/html; charset=utf-8" || a.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%d %v", a.status, a.header)
	}
	csp := a.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
		t.Errorf("CSP allows more than this origin: %q", csp)
	}
	if strings.Contains(a.body, "<script>") || strings.Contains(a.body, "style=") || !strings.Contains(a.body, `data-url="/api/schema/"`) {
		t.Errorf("page has inline code or no schema URL:\n%s", a.body)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(a.body, -1)
	wantTypes := map[string]string{
		"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
		"swagger-ui.css":       "text/css; charset=utf-8",
		"docs.js":              "text/javascript; charset=utf-8",
	}
	found := 0
	for _, m := range refs {
		ref := strings.ReplaceAll(m[1], "&amp;", "&")
		if !strings.HasPrefix(ref, Prefix) {
			t.Errorf("page refers to %s, outside %s", ref, Prefix)
			continue
		}
		base := ref[strings.LastIndex(ref, "/")+1 : strings.Index(ref, "?")]
		want, ok := wantTypes[base]
		if !ok {
			t.Errorf("unexpected asset %s", ref)
			continue
		}
		found++
		asset := get(t, srv.URL+ref)
		if asset.status != http.StatusOK || asset.header.Get("Content-Type") != want || len(asset.body) == 0 ||
			asset.header.Get("Cache-Control") != "public, max-age=31536000, immutable" || asset.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %v", ref, asset.status, asset.header)
		}
	}
	if found != len(wantTypes) {
		t.Errorf("page links %d of the %d assets: %s", found, len(wantTypes), a.body)
	}
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	t.Parallel()
	err := FrontConfig{}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Name") || !strings.Contains(err.Error(), "Version") {
		t.Fatalf("%v", err)
	}
	if err := DefaultFrontConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	assets, err := NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	if err := MountFront(r, DefaultFrontConfig(), assets, Link{Rel: "docs", Href: "/x/"}); err == nil {
		t.Error("a repeated link name was accepted")
	}
}
