package docs

import (
	"os"
	"strings"
	"testing"
)

// TestEveryDirectDependencyIsExplained holds dependencies.md to go.mod:
// each module of go.mod's direct require block is named there, with why.
func TestEveryDirectDependencyIsExplained(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("dependencies.md")
	if err != nil {
		t.Fatal(err)
	}
	direct := directRequires(string(mod))
	if len(direct) == 0 {
		t.Fatal("no direct requirements found in go.mod")
	}
	for _, m := range direct {
		if !strings.Contains(string(doc), "`"+m+"`") {
			t.Errorf("go.mod requires %s directly; dependencies.md does not say why", m)
		}
	}
}

// directRequires lists the modules of go.mod's require lines that are not
// marked // indirect.
func directRequires(mod string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(mod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			in = true
			continue
		case line == ")":
			in = false
			continue
		case strings.HasPrefix(line, "require ") && !strings.HasSuffix(line, "("):
			line = strings.TrimPrefix(line, "require ")
		case !in:
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 && !strings.Contains(line, "// indirect") {
			out = append(out, f[0])
		}
	}
	return out
}
