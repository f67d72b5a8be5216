package media_test

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest/media"
)

func TestServesOnlyStoredFiles(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "media")
	s, err := media.Open(media.Config{Dir: dir, URL: media.PathPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write("avatars/1/a.png", []byte("\x89PNG\r\n\x1a\nnot-really")); err != nil {
		t.Fatal(err)
	}
	// Bait outside the folder, and ways to reach it from inside.
	secret := filepath.Join(parent, "secret.txt")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "avatars", "1", "link.png")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../secret.txt", filepath.Join(dir, "avatars", "1", "rel.png")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "avatars", "1", ".hidden.png.tmp"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	s.Mount(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	tests := []struct {
		path   string
		status int
	}{
		{"/media/avatars/1/a.png", 200},
		{"/media/avatars/1/", 404},
		{"/media/avatars/1", 404},
		{"/media/avatars", 404},
		{"/media/", 404},
		{"/media/avatars/1/missing.png", 404},
		{"/media/avatars/1/link.png", 404},
		{"/media/avatars/1/rel.png", 404},
		{"/media/avatars/1/.hidden.png.tmp", 404},
		{"/media/../secret.txt", 404},
		{"/media/%2e%2e/secret.txt", 404},
		{"/media/..%2fsecret.txt", 404},
		{"/media/avatars/1/..%2f..%2f..%2fsecret.txt", 404},
		{"/media/%2fetc%2fpasswd", 404},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			res, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || strings.Contains(string(body), "SECRET") {
				t.Fatalf("%d %q", res.StatusCode, body)
			}
			if tc.status != 200 {
				return
			}
			h := res.Header
			if h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" ||
				!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") || !strings.Contains(h.Get("Cache-Control"), "immutable") {
				t.Fatalf("headers %v", h)
			}
		})
	}
	res, err := http.Post(srv.URL+"/media/avatars/1/a.png", "image/png", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", res.StatusCode)
	}
}

func TestWriteAndRemove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := media.Open(media.Config{Dir: dir, URL: "https://cdn.example.com/m/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.URL("avatars/1/a.png"); got != "https://cdn.example.com/m/avatars/1/a.png" {
		t.Errorf("URL %q", got)
	}
	if err := s.Write("avatars/1/a.png", []byte("one")); err != nil {
		t.Fatal(err)
	}
	// A stored file is never replaced.
	if err := s.Write("avatars/1/a.png", []byte("two")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("overwrite: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "avatars", "1", "a.png")); string(b) != "one" {
		t.Errorf("content %q", b)
	}
	for _, name := range []string{"../x.png", "/etc/x.png", "a/../../x.png", "", ".", "avatars/.x.png", "avatars//x.png"} {
		if err := s.Write(name, []byte("x")); err == nil {
			t.Errorf("Write(%q) accepted", name)
		}
		if err := s.Remove(name); err == nil {
			t.Errorf("Remove(%q) accepted", name)
		}
	}
	if err := s.Remove("avatars/1/a.png"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("avatars/1/a.png"); err != nil {
		t.Errorf("removing a removed file: %v", err)
	}
	var left []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return err
	})
	if len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  media.Config
		errs []string
	}{
		{media.DefaultConfig(), nil},
		{media.Config{Dir: "/srv/media", URL: "https://cdn.example.com/media/"}, nil},
		{media.Config{}, []string{"Dir", "URL"}},
		{media.Config{Dir: "x", URL: "/media"}, []string{"URL"}},
		{media.Config{Dir: "x", URL: "ftp://x/"}, []string{"URL"}},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if (err == nil) != (len(tc.errs) == 0) {
			t.Errorf("%+v: %v", tc.cfg, err)
			continue
		}
		for _, want := range tc.errs {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: %v lacks %s", tc.cfg, err, want)
			}
		}
	}
}
