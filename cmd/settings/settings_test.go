package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/deploy/config"
)

func TestEveryProblemOnItsOwnLine(t *testing.T) {
	r := config.NewReader(config.FromMaps(map[string]string{"HTTP__ADDR": "nope", "KAFKA__PARTITIONS": "0", "JWT__X": "1"}, nil))
	ReadCore(r)
	lines := strings.Split(r.Err().Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "HTTP__ADDR:") || !strings.HasPrefix(lines[1], "KAFKA__PARTITIONS:") {
		t.Fatalf("got %q", lines)
	}
}

func TestLoadDotenvFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	if err := os.WriteFile(path, []byte("CFGD_TEST_ONLY_IN_FILE=file\nCFGD_TEST_BOTH=file\n# comment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CFGD_TEST_BOTH", "env")
	src, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := config.NewReader(src)
	if got := r.String("CFGD_TEST_ONLY_IN_FILE", ""); got != "file" {
		t.Errorf("file value: got %q", got)
	}
	if got := r.String("CFGD_TEST_BOTH", ""); got != "env" {
		t.Errorf("env must win over .env: got %q", got)
	}
	if _, err := Load(filepath.Join(dir, "missing.env")); err != nil {
		t.Errorf("a missing .env is fine: %v", err)
	}
}
