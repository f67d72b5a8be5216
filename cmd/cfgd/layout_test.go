package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Configuration flows down: no package outside cmd/ depends on cmd/...
// (only cmd/settings reads the environment).
func TestNothingOutsideCmdImportsCmd(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const cmd = "github.com/cfgd/cfgd/cmd/"
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
