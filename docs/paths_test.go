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
