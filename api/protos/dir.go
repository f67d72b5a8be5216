package protos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is the folder (GRPC__PROTO_DIR) the proto files are written to and
// served from.
type Dir struct {
	root    string
	sources []Source
	byLabel map[string]Source
}

// NewDir returns the folder at root with the embedded sources.
func NewDir(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("protos: the proto folder is required")
	}
	src, err := Sources()
	if err != nil {
		return nil, err
	}
	d := &Dir{root: root, sources: src, byLabel: map[string]Source{}}
	for _, s := range src {
		d.byLabel[s.AppLabel] = s
	}
	return d, nil
}

// Root is the folder.
func (d *Dir) Root() string { return d.root }

// Labels lists every app label.
func (d *Dir) Labels() []string {
	out := make([]string, 0, len(d.sources))
	for _, s := range d.sources {
		out = append(out, s.AppLabel)
	}
	return out
}

// Errors a label can have.
var (
	ErrBadLabel     = errors.New("an app label is lower-case letters, digits and underscores, with no path separators or '..'")
	ErrUnknownLabel = errors.New("no proto file for this app")
	ErrNotGenerated = errors.New("the proto file has not been generated yet")
)

var labelRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// CheckLabel rejects anything that is not a plain label before it can be
// used in a path.
func CheckLabel(label string) error {
	if strings.ContainsAny(label, `/\`) || strings.Contains(label, "..") || !labelRE.MatchString(label) {
		return ErrBadLabel
	}
	return nil
}

func (d *Dir) path(s Source) string { return filepath.Join(d.root, filepath.FromSlash(s.Path)) }

// File is one written proto file as the list reports it (docs/api.md#grpc).
type File struct {
	AppLabel      string  `json:"app_label"`
	Filename      string  `json:"filename"`
	Path          string  `json:"path"` // inside the folder and the zip
	SizeBytes     int64   `json:"size_bytes"`
	Package       string  `json:"package"`
	MessagesCount int     `json:"messages_count"`
	ServicesCount int     `json:"services_count"`
	CreatedAt     float64 `json:"created_at"`
	ModifiedAt    float64 `json:"modified_at"`
}

// List describes every written file; a file missing from the folder is
// left out.
func (d *Dir) List() ([]File, error) {
	out := []File{}
	for _, s := range d.sources {
		f, err := d.describe(s)
		if errors.Is(err, ErrNotGenerated) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func (d *Dir) describe(s Source) (File, error) {
	p := d.path(s)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return File{}, ErrNotGenerated
	}
	if err != nil {
		return File{}, fmt.Errorf("protos: %w", err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return File{}, fmt.Errorf("protos: %w", err)
	}
	info := Parse(b)
	mod := st.ModTime()
	return File{
		AppLabel: s.AppLabel, Filename: s.Filename(), Path: s.Path, SizeBytes: int64(len(b)),
		Package: info.Package, MessagesCount: info.Messages, ServicesCount: info.Services,
		CreatedAt: unixSeconds(birthTime(p, mod)), ModifiedAt: unixSeconds(mod),
	}, nil
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// birthTime is the file's creation time where the file system records
// one, else its modification time.
func birthTime(p string, fallback time.Time) time.Time {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_BTIME, &stx); err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return fallback
	}
	return time.Unix(stx.Btime.Sec, int64(stx.Btime.Nsec))
}

// Read returns the written file of label.
func (d *Dir) Read(label string) (Source, []byte, error) {
	if err := CheckLabel(label); err != nil {
		return Source{}, nil, err
	}
	s, ok := d.byLabel[label]
	if !ok {
		return Source{}, nil, ErrUnknownLabel
	}
	b, err := os.ReadFile(d.path(s))
	if errors.Is(err, os.ErrNotExist) {
		return s, nil, ErrNotGenerated
	}
	if err != nil {
		return s, nil, fmt.Errorf("protos: %w", err)
	}
	return s, b, nil
}

// Result of a Generate.
type Result struct {
	Generated []string // labels written
	Errors    []LabelError
}

// LabelError is one app that could not be generated.
type LabelError struct {
	AppLabel string `json:"app_label"`
	Error    string `json:"error"`
}

// Generate writes the embedded files of apps (every app when empty) into
// the folder. A file whose content is already current is skipped unless
// force. Unknown or malformed labels are reported in Errors, per label.
func (d *Dir) Generate(apps []string, force bool) Result {
	res := Result{Generated: []string{}, Errors: []LabelError{}}
	if len(apps) == 0 {
		apps = d.Labels()
	}
	seen := map[string]bool{}
	for _, label := range apps {
		if seen[label] {
			continue
		}
		seen[label] = true
		if err := CheckLabel(label); err != nil {
			res.Errors = append(res.Errors, LabelError{AppLabel: label, Error: err.Error()})
			continue
		}
		s, ok := d.byLabel[label]
		if !ok {
			res.Errors = append(res.Errors, LabelError{AppLabel: label, Error: ErrUnknownLabel.Error()})
			continue
		}
		p := d.path(s)
		if !force {
			if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, s.Content) {
				continue
			}
		}
		if err := writeAtomic(p, s.Content); err != nil {
			res.Errors = append(res.Errors, LabelError{AppLabel: label, Error: err.Error()})
			continue
		}
		res.Generated = append(res.Generated, label)
	}
	return res
}

// writeAtomic replaces p whole, so a reader never sees half a file.
func writeAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
