package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cfgd/cfgd/"

// floors are the import rules of docs/architecture.md: a package under
// a prefix imports, of cfgd's packages, only those under the prefixes
// listed (the longest matching prefix decides). Test files may import
// more (rigs, other floors to build fixtures); the rules hold for what
// ships.
var floors = []struct {
	prefix string
	may    []string
}{
	{"deploy", []string{"deploy"}},
	{"docs", nil},
	{"events", []string{"events", "deploy"}},
	{"readmodels", []string{"readmodels", "events", "deploy"}},
	{"projections", []string{"projections", "readmodels", "events", "deploy"}},
	{"commands", []string{"commands", "readmodels", "events", "deploy"}},
	{"api", []string{"api", "commands", "readmodels", "events", "deploy", "docs"}},
	// The transports and the worker are siblings: none calls another.
	{"api/rest", []string{"api/rest", "api/pages", "api/protos", "commands", "readmodels", "events", "deploy", "docs"}},
	{"api/grpcserver", []string{"api/grpcserver", "api/protos", "commands", "readmodels", "events", "deploy"}},
	{"api/worker", []string{"api/worker", "commands", "readmodels", "events", "deploy"}},
	// The reporter is a client library for other services: gRPC and
	// protobuf only, nothing of cfgd but its protos and the request-log
	// vocabulary.
	{"api/reporter", []string{"api/protos", "events/requestlog"}},
	{"cmd", []string{""}},
}

// rigs are test rigs: imported only from _test.go files (and each other).
var rigs = []string{"cmd/cfgd/testenv", "cmd/cfgd/authtest", "cmd/cfgd/grpctest", "cmd/cfgd/browsertest"}

// under says whether pkg is prefix or inside it ("" holds everything).
func under(pkg, prefix string) bool {
	return prefix == "" || pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

func rule(pkg string) (prefix string, may []string, ok bool) {
	for _, f := range floors {
		if under(pkg, f.prefix) && len(f.prefix) >= len(prefix) {
			prefix, may, ok = f.prefix, f.may, true
		}
	}
	return prefix, may, ok
}

func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}`, "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, "|")
		pkg := strings.TrimPrefix(path, module)
		if strings.HasPrefix(pkg, "api/protos/") {
			continue // generated code
		}
		_, may, ok := rule(pkg)
		if !ok {
			t.Errorf("%s is under no floor of the import rules: add it to the table", pkg)
			continue
		}
		checked++
		for _, imp := range strings.Fields(imports) {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			for _, r := range rigs {
				if dep == r && !slices.Contains(rigs, pkg) {
					t.Errorf("%s imports the test rig %s outside a _test.go file", pkg, dep)
				}
			}
			allowed := false
			for _, m := range may {
				if under(dep, m) {
					allowed = true
				}
			}
			if !allowed {
				t.Errorf("%s imports %s: its floor may import only %v", pkg, dep, may)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d packages checked: go list output changed?", checked)
	}
}

// Package names are unique, so no internal import needs an alias and a
// name says which package it is.
func TestPackageNamesAreUnique(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.Name}} {{.ImportPath}}`, "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, path, _ := strings.Cut(line, " ")
		if name == "main" {
			continue
		}
		if other, dup := seen[name]; dup {
			t.Errorf("package name %s is used by %s and %s", name, other, path)
		}
		seen[name] = path
	}
}

// Configuration flows down: no package outside cmd/ depends on cmd/...
// (only cmd/settings reads the environment).
func TestNothingOutsideCmdImportsCmd(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const cmd = module + "cmd/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, cmd) {
			continue
		}
		for _, d := range strings.Fields(deps) {
			if strings.HasPrefix(d, cmd) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}
