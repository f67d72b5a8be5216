package grpcadmin_test

import (
	"archive/zip"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/api/protos"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/events/apikey"
)

func TestProtoFileListAndContent(t *testing.T) {
	t.Parallel()
	e, admin, hdr := adminEnv(t)
	key := e.NewKey(t, "protos", apikey.TypeDevelopment, admin, nil).Key
	src, err := protos.Sources()
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string][]string{"staff": hdr, "API key": {"X-API-Key", key}} {
		r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/", nil, h...)
		files, _ := r.Body["files"].([]any)
		// The server's folder is for staff; a key never sees it.
		wantDir := map[string]any{"staff": e.Protos.Root(), "API key": nil}[name]
		if r.Status != http.StatusOK || r.Body["total_files"] != float64(len(src)) || len(files) != len(src) || r.Body["proto_dir"] != wantDir {
			t.Fatalf("list as %s: %d %s", name, r.Status, r.Raw)
		}
		for i, f := range files {
			m := f.(map[string]any)
			for _, k := range []string{"app_label", "filename", "size_bytes", "package", "messages_count", "services_count", "created_at", "modified_at"} {
				if _, ok := m[k]; !ok {
					t.Errorf("a file record lacks %s: %v", k, m)
				}
			}
			info := protos.Parse(src[i].Content)
			if m["app_label"] != src[i].AppLabel || m["size_bytes"] != float64(len(src[i].Content)) || m["package"] != info.Package ||
				m["messages_count"] != float64(info.Messages) || m["services_count"] != float64(info.Services) || m["modified_at"].(float64) < 1e9 {
				t.Errorf("record %v for %s", m, src[i].Path)
			}
		}
	}
	r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/apikeys/", nil, "X-API-Key", key)
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") || !strings.Contains(string(r.Raw), "package cfgd.apikeys.v1;") {
		t.Fatalf("apikeys file: %d %s %s", r.Status, r.Header.Get("Content-Type"), r.Raw)
	}
	if r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/payments/", nil, hdr...); r.Status != http.StatusNotFound {
		t.Fatalf("unknown label: %d %s", r.Status, r.Raw)
	}
	if r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/", nil, "X-API-Key", key+"x"); r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d %s", r.Status, r.Raw)
	}
}

// A label with a path separator or '..' is refused before it can reach the
// file system. A '..' that is a whole path segment never reaches the
// endpoint: the router cleans the path and redirects away from it.
func TestProtoFileLabelTraversal(t *testing.T) {
	t.Parallel()
	e, _, hdr := adminEnv(t)
	// A file outside the folder the endpoint must never serve.
	secret := filepath.Join(filepath.Dir(e.Protos.Root()), "secret.proto")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	tests := []struct {
		label string
		want  int
	}{
		{"a%2Fb", http.StatusBadRequest},
		{"a%2F..%5Cb", http.StatusBadRequest},
		{"..%5Csecret", http.StatusBadRequest},
		{"a%5Cb", http.StatusBadRequest},
		{`a\b`, http.StatusBadRequest},
		{"api..keys", http.StatusBadRequest},
		{"...", http.StatusBadRequest},
		{"apikeys%00", http.StatusBadRequest},
		{"APIKEYS", http.StatusBadRequest},
		{"..", http.StatusBadRequest},
		{"%2E%2E", http.StatusBadRequest},
		{"../../secret", http.StatusBadRequest},
		{"..%2F..%2Fsecret", http.StatusBadRequest},
		{"%2E%2E%2Fsecret", http.StatusBadRequest},
		{"nope", http.StatusNotFound},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodGet, e.URL+"/cfg/grpc/proto-files/"+tc.label+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(hdr[0], hdr[1])
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || strings.Contains(body.String(), "SECRET") {
			t.Errorf("label %q: %d %s", tc.label, resp.StatusCode, body.String())
		}
		if loc := resp.Header.Get("Location"); tc.want == http.StatusMovedPermanently && strings.HasPrefix(loc, "/cfg/grpc/proto-files/") {
			t.Errorf("label %q redirects into the endpoint: %s", tc.label, loc)
		}
	}
}

func TestProtoFilesGenerate(t *testing.T) {
	t.Parallel()
	e, _, hdr := adminEnv(t)
	post := func(body any) authtest.Response {
		return e.Do(t, http.MethodPost, "/cfg/grpc/proto-files/generate/", body, hdr...)
	}
	// Start wrote every file; unforced, nothing changes.
	r := post(map[string]any{})
	if r.Status != http.StatusOK || r.Body["status"] != "success" || r.Body["generated_count"] != 0.0 || r.Body["proto_dir"] != e.Protos.Root() {
		t.Fatalf("unforced: %d %s", r.Status, r.Raw)
	}
	if r := post(nil); r.Status != http.StatusOK || r.Body["generated_count"] != 0.0 {
		t.Fatalf("empty body: %d %s", r.Status, r.Raw)
	}
	r = post(map[string]any{"force": true})
	if r.Body["generated_count"] != float64(len(e.Protos.Labels())) {
		t.Fatalf("forced: %s", r.Raw)
	}
	// A file changed on disk is restored; a deleted one is listed again
	// only after generate.
	p := filepath.Join(e.Protos.Root(), "cfgd", "monitor", "v1", "monitor.proto")
	if err := os.WriteFile(p, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = post(map[string]any{"apps": []string{"monitor", "apikeys"}})
	if g := r.Body["generated"].([]any); len(g) != 1 || g[0] != "monitor" {
		t.Fatalf("after tampering: %s", r.Raw)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/", nil, hdr...); r.Body["total_files"] != float64(len(e.Protos.Labels())-1) {
		t.Fatalf("list after delete: %s", r.Raw)
	}
	if r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/monitor/", nil, hdr...); r.Status != http.StatusNotFound {
		t.Fatalf("deleted file: %d %s", r.Status, r.Raw)
	}
	r = post(map[string]any{"apps": []string{"monitor", "nope", "../x"}})
	if r.Body["status"] != "partial" || r.Body["generated_count"] != 1.0 || len(r.Body["errors"].([]any)) != 2 {
		t.Fatalf("mixed: %s", r.Raw)
	}
	r = post(map[string]any{"apps": []string{"nope"}})
	if r.Body["status"] != "error" || r.Body["generated_count"] != 0.0 {
		t.Fatalf("only unknown: %s", r.Raw)
	}
	for _, bad := range []string{`{"apps": "monitor"}`, `{"force": "yes"}`, `{"other": 1}`, `{`} {
		if r := post(bad); r.Status != http.StatusBadRequest {
			t.Errorf("body %s: %d %s", bad, r.Status, r.Raw)
		}
	}
}

// The zip holds every file at its import path, and protoc compiles them.
func TestProtoZipCompilesWithProtoc(t *testing.T) {
	t.Parallel()
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatal("protoc is required (Debian protobuf-compiler; deploy/scripts/local/stack.sh up installs it)")
	}
	e, _, hdr := adminEnv(t)
	r := e.Do(t, http.MethodGet, "/cfg/grpc/proto-files/download-all/", nil, hdr...)
	if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/zip" {
		t.Fatalf("zip: %d %s", r.Status, r.Header)
	}
	zr, err := zip.NewReader(bytes.NewReader(r.Raw), int64(len(r.Raw)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var names []string
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, "cfgd/") || strings.Contains(f.Name, "..") || !strings.HasSuffix(f.Name, ".proto") {
			t.Fatalf("zip entry %q", f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(rc)
		rc.Close()
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, f.Name)
	}
	if len(names) != len(e.Protos.Labels()) {
		t.Fatalf("zip holds %v", names)
	}
	args := append([]string{"-I", dir, "-o", filepath.Join(dir, "out.pb")}, names...)
	cmd := exec.Command(protoc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
}
