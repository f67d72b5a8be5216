package pages

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

func TestAssetsServedWithTypeAndCache(t *testing.T) {
	t.Parallel()
	assets, err := NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	assets.Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	bundle := assets.URL("swagger-ui/swagger-ui-bundle.js")
	unversioned, _, _ := strings.Cut(bundle, "?")
	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		status int
		ctype  string
		cache  string
	}{
		{"versioned script", http.MethodGet, bundle, nil, 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"versioned stylesheet", http.MethodGet, assets.URL("swagger-ui/swagger-ui.css"), nil, 200, "text/css; charset=utf-8", "public, max-age=31536000, immutable"},
		{"own script", http.MethodGet, assets.URL("cfgd/docs.js"), nil, 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"licence", http.MethodGet, assets.URL("swagger-ui/LICENSE"), nil, 200, "application/octet-stream", "public, max-age=31536000, immutable"},
		{"unversioned is revalidated", http.MethodGet, unversioned, nil, 200, "text/javascript; charset=utf-8", "no-cache"},
		{"stale version is revalidated", http.MethodGet, unversioned + "?v=0000", nil, 200, "text/javascript; charset=utf-8", "no-cache"},
		{"HEAD", http.MethodHead, bundle, nil, 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"folder", http.MethodGet, Prefix + "swagger-ui/", nil, 404, "", ""},
		{"folder without slash", http.MethodGet, Prefix + "swagger-ui", nil, 404, "", ""},
		{"unknown", http.MethodGet, Prefix + "nope.js", nil, 404, "", ""},
		{"escape", http.MethodGet, Prefix + "..%2fstatic.go", nil, 404, "", ""},
		{"POST", http.MethodPost, bundle, nil, 405, "", ""},
		// A query that does not decode is refused, not read as no version.
		{"query not URL encoding", http.MethodGet, bundle + "&v=%zz", nil, 400, "", ""},
		{"query not URL encoding, unversioned", http.MethodGet, unversioned + "?v=%zz", nil, 400, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("%d, want %d", res.StatusCode, tc.status)
			}
			if tc.status != 200 {
				return
			}
			if got := res.Header.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if got := res.Header.Get("Cache-Control"); got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("ETag") == "" {
				t.Errorf("headers %v", res.Header)
			}
			if (tc.method == http.MethodHead) != (len(body) == 0) {
				t.Errorf("%s body of %d bytes", tc.method, len(body))
			}
		})
	}

	// A browser holding an unversioned copy revalidates it for a 304.
	res, err := http.Get(srv.URL + unversioned)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+unversioned, nil)
	req.Header.Set("If-None-Match", res.Header.Get("ETag"))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d", res.StatusCode)
	}
}

// Text assets go gzip-encoded to clients that accept it, as their own
// representation (ETag); the decoded bytes are the embedded file.
func TestGzipEncoding(t *testing.T) {
	t.Parallel()
	assets, err := NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	assets.Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	// The default transport would ask for gzip and decode it unseen.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	fetch := func(path, acceptEncoding, ifNoneMatch string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, b
	}
	bundle := assets.URL("swagger-ui/swagger-ui-bundle.js")
	plainRes, plain := fetch(bundle, "identity", "")
	if plainRes.Header.Get("Content-Encoding") != "" || len(plain) < 1_000_000 {
		t.Fatalf("identity: %v, %d bytes", plainRes.Header, len(plain))
	}
	tests := []struct {
		accept string
		gzip   bool
	}{
		{"gzip", true},
		{"br, gzip, deflate", true},
		{"gzip;q=0.5, identity", true},
		{"*", true},
		{"gzip;q=0", false},
		{"br", false},
		{"", false},
	}
	for _, tc := range tests {
		res, body := fetch(bundle, tc.accept, "")
		if got := res.Header.Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Errorf("%q: Content-Encoding %q", tc.accept, res.Header.Get("Content-Encoding"))
			continue
		}
		if !strings.Contains(res.Header.Get("Vary"), "Accept-Encoding") || res.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
			t.Errorf("%q: headers %v", tc.accept, res.Header)
		}
		if !tc.gzip {
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(decoded, plain) || len(body) > len(plain)/2 {
			t.Fatalf("%q: %d bytes decode to %d (%v)", tc.accept, len(body), len(decoded), err)
		}
		if res.Header.Get("ETag") == plainRes.Header.Get("ETag") {
			t.Errorf("both encodings have ETag %s", res.Header.Get("ETag"))
		}
		if again, _ := fetch(bundle, tc.accept, res.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
			t.Errorf("%q: revalidation %d", tc.accept, again.StatusCode)
		}
	}
	// Binary files are not compressed.
	if res, _ := fetch(assets.URL("swagger-ui/NOTICE"), "gzip", ""); res.Header.Get("Content-Encoding") != "" {
		t.Errorf("octet-stream was gzipped")
	}
}

func TestURLOfMissingAssetPanics(t *testing.T) {
	t.Parallel()
	assets, err := NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	assets.URL("missing.js")
}
