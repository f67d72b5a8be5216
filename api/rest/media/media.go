// Package media keeps files users uploaded (avatars today) under one
// directory and serves them read-only under /media/. Every name it is given
// is chosen by the server, never by a client, and every access goes
// through os.Root, so no name (nor a symbolic link planted in the folder)
// can reach outside the directory.
package media

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/deploy/errcode"
)

// PathPrefix is where Mount serves the files.
const PathPrefix = "/media/"

// Config says where media files live and how clients reach them.
type Config struct {
	// Dir holds the files; it is created if missing.
	Dir string
	// URL is the prefix of the address a stored file is shown under: the
	// default PathPrefix, or a CDN or proxy address ending in "/".
	URL string
}

// DefaultConfig is the configuration without overrides.
func DefaultConfig() Config { return Config{Dir: "./data/media", URL: PathPrefix} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Dir) == "" {
		errs = append(errs, errors.New("media: Dir is empty"))
	}
	if !strings.HasSuffix(c.URL, "/") ||
		!(strings.HasPrefix(c.URL, "/") || strings.HasPrefix(c.URL, "https://") || strings.HasPrefix(c.URL, "http://")) {
		errs = append(errs, fmt.Errorf("media: URL %q must be a path or http(s) URL ending in /", c.URL))
	}
	return errors.Join(errs...)
}

// Store reads and writes the media directory.
type Store struct {
	dir string
	url string
}

// Open checks cfg and creates the directory.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("media: create %s: %w", cfg.Dir, err)
	}
	return &Store{dir: cfg.Dir, url: cfg.URL}, nil
}

// URL is the address a client fetches stored file name from.
func (s *Store) URL(name string) string { return s.url + name }

// root opens the directory per call rather than holding a descriptor for
// the process's life: the store then needs no Close, and the extra open is
// negligible next to the file's own.
func (s *Store) root() (*os.Root, error) {
	r, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("media: open %s: %w", s.dir, err)
	}
	return r, nil
}

// checkName refuses anything but a clean relative path whose parts do not
// start with a dot (those are the store's temporary files).
func checkName(name string) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("media: invalid name %q", name)
	}
	for part := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(part, ".") {
			return fmt.Errorf("media: invalid name %q", name)
		}
	}
	return nil
}

// Write stores data as name, which must not exist yet. The file appears
// complete or not at all: it is written under a temporary name and renamed.
func (s *Store) Write(name string, data []byte) (err error) {
	if err := checkName(name); err != nil {
		return err
	}
	root, err := s.root()
	if err != nil {
		return err
	}
	defer root.Close()
	dir, base := path.Split(name)
	if dir != "" {
		if err := root.MkdirAll(strings.TrimSuffix(dir, "/"), 0o750); err != nil {
			return fmt.Errorf("media: create folder for %s: %w", name, err)
		}
	}
	tmp := dir + "." + base + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("media: create %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("media: write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("media: sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("media: close %s: %w", name, err)
	}
	// A hard link, unlike a rename, never replaces an existing file.
	if err := root.Link(tmp, name); err != nil {
		return fmt.Errorf("media: store %s: %w", name, err)
	}
	// The file is stored; a leftover temporary name (never served, as it
	// starts with a dot) is no reason to fail.
	_ = root.Remove(tmp)
	return nil
}

// Remove deletes name; a file that is already gone is no error.
func (s *Store) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	root, err := s.root()
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("media: remove %s: %w", name, err)
	}
	return nil
}

// Mount serves the stored files read-only under PathPrefix.
func (s *Store) Mount(r *mux.Router) {
	r.Handle(PathPrefix+"{file:.+}", s).Methods(http.MethodGet, http.MethodHead).Name("media")
}

// ServeHTTP answers a stored regular file; anything else (a folder, a
// temporary file, a name that would leave the directory) is a 404, so
// nothing can be listed or probed.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, PathPrefix)
	if checkName(name) != nil {
		notFound(w)
		return
	}
	root, err := s.root()
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		notFound(w)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		notFound(w)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	// Should anything but an image ever land here, it still cannot run
	// script in this origin.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	// Stored names are random and never reused: a file never changes.
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	if ct := contentType(path.Ext(name)); ct != "" {
		h.Set("Content-Type", ct)
	}
	http.ServeContent(w, r, name, info.ModTime(), io.ReadSeeker(f))
}

// contentType names the types the store writes; ServeContent sniffs any
// other, and nosniff then keeps a browser from second-guessing it.
func contentType(ext string) string {
	switch ext {
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".webp":
		return "image/webp"
	}
	return ""
}

func notFound(w http.ResponseWriter) {
	rest.WriteError(w, errcode.New(errcode.NotFound, "no such file"))
}
