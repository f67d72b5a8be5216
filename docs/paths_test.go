package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pathRef finds a repository path in backquotes, such as `api/rest/auth`,
// `commands/otp/verify.go` or `events/store.Store` (an identifier after
// the path is allowed).
var pathRef = regexp.MustCompile("`(?:\\./)?((?:api|cmd|commands|events|projections|readmodels|deploy)/[A-Za-z0-9_./-]*)")

// TestDocsNameExistingPaths keeps the package map true: every package or
// file the README and docs/*.md name in backquotes exists, so a newcomer
// following docs/architecture.md never lands on a moved package.
func TestDocsNameExistingPaths(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pathRef.FindAllStringSubmatch(string(b), -1) {
			p := strings.TrimRight(m[1], "./")
			if strings.Contains(p, "testdata/artifacts") { // written by the browser tests
				continue
			}
			if !exists(filepath.Join("..", p)) {
				t.Errorf("%s names %s, which does not exist", page, m[1])
			}
		}
	}
}

// exists tells whether p, or p without a trailing .Identifier, is a file
// or folder.
func exists(p string) bool {
	for {
		if _, err := os.Stat(p); err == nil {
			return true
		}
		dir, base := filepath.Split(p)
		i := strings.LastIndex(base, ".")
		if i <= 0 {
			return false
		}
		p = dir + base[:i]
	}
}

// relRef is a relative path a page links to ([text](../x.md)) or names in
// backquotes as a path above it (`../x/SPEC.md`); `./data` and the like
// are paths of a running cfgd, not of the repository.
var relRef = regexp.MustCompile("\\]\\(([^)#\\s]+)[^)]*\\)|`(\\.\\./[^`\\s]*)`")

// TestDocsStayInTheRepository keeps the front door whole: every relative
// path the README and docs/*.md link to or name exists inside the
// repository, so what a user needs is in it (the README once sent readers
// to a SPEC.md in a folder beside the clone, which a clone does not have).
func TestDocsStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range relRef.FindAllStringSubmatch(string(b), -1) {
			ref := m[1] + m[2]
			if strings.Contains(ref, "://") || strings.HasPrefix(ref, "mailto:") || strings.HasPrefix(ref, "/") {
				continue
			}
			p, err := filepath.Abs(filepath.Join(filepath.Dir(page), ref))
			if err != nil {
				t.Fatal(err)
			}
			switch rel, err := filepath.Rel(root, p); {
			case err != nil || rel == ".." || strings.HasPrefix(rel, "../"):
				t.Errorf("%s names %s, outside the repository", page, ref)
			case !exists(p):
				t.Errorf("%s names %s, which does not exist", page, ref)
			}
		}
	}
	// Nothing else in the repository points there either.
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") && name != ".ci" || name == "data" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 1<<20 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "../"+"shared") {
			rel, _ := filepath.Rel(root, p)
			t.Errorf("%s refers to ../%s, which is not in the repository", rel, "shared")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
