package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/events"
)

// cfgd keys generate writes the shared keys (never printing them unless
// asked with --print) and keeps existing ones; cfgd keys rotate puts a new
// signing key first and keeps the old one for verification.
func TestKeysCommands(t *testing.T) {
	baseEnv(t, "postgres://unused/cfgd")
	dir := filepath.Join(t.TempDir(), "shared")
	empty := t.TempDir()
	jwtFile := filepath.Join(dir, "jwt-ed25519.pem")
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{"group alone", nil, []string{"keys"}, 2, "cfgd keys [command]", ""},
		{"unknown command", nil, []string{"keys", "rotat"}, 2, `did you mean "rotate"?`, ""},
		{"dir and print", nil, []string{"keys", "generate", "--dir", dir, "--print"}, 2, "--dir and --print: choose one", ""},
		{"empty dir", nil, []string{"keys", "generate", "--dir", ""}, 2, "--dir: a directory is required", ""},
		{"argument", nil, []string{"keys", "generate", "x"}, 2, "takes no arguments", ""},
		{"rotate before generate", nil, []string{"keys", "rotate", "--dir", empty}, 1, "run cfgd keys generate first", ""},
		{"generate", nil, []string{"keys", "generate", "--dir", dir}, 0, "", "wrote  " + jwtFile + " (EdDSA, kid "},
		{"generate again keeps", nil, []string{"keys", "generate", "--dir", dir}, 0, "", "kept   " + jwtFile},
		{"generate HS256 beside", map[string]string{"JWT__ALGORITHM": "HS256"}, []string{"keys", "generate", "--dir", dir}, 0, "", "wrote  " + filepath.Join(dir, "jwt-hs256.key")},
		{"print", nil, []string{"keys", "generate", "--print"}, 0, "", "\nJWT__SIGNING_KEY="},
		{"rotate", nil, []string{"keys", "rotate", "--dir", dir}, 0, "", "new signing key: kid "},
		{"rotate with a key in the settings", map[string]string{"JWT__SIGNING_KEY": strings.Repeat("A", 43) + "="}, []string{"keys", "rotate", "--dir", dir}, 2, "JWT__SIGNING_KEY is set", ""},
	}
	outputs := map[string]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, stdout, msg := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(msg, tc.stderr) || !strings.Contains(stdout, tc.stdout) {
				t.Fatalf("%q: exit %d, stderr %q, stdout %q", tc.args, code, msg, stdout)
			}
			outputs[tc.name] = stdout
		})
	}

	// Every file is private and no key reached standard output.
	for _, name := range []string{"jwt-ed25519.pem", "jwt-hs256.key", "otp-hmac.key", "event-signing.key"} {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", name, fi, err)
		}
		content, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(content), "\n") {
			if secret := strings.TrimSpace(strings.Fields(line + " x")[0]); len(secret) > 20 && strings.Contains(outputs["generate"]+outputs["rotate"], secret) {
				t.Fatalf("a key of %s was printed", name)
			}
		}
	}
	if _, err := events.ReadSigningKey(filepath.Join(dir, "event-signing.key")); err != nil {
		t.Fatal(err)
	}
	// The rotation kept the generated key for verification.
	firstKid := regexp.MustCompile(`kid (\S+)\)`).FindStringSubmatch(outputs["generate"])[1]
	newKid := regexp.MustCompile(`new signing key: kid (\S+) `).FindStringSubmatch(outputs["rotate"])[1]
	keys, err := token.Source{Alg: token.EdDSA, Dir: dir, NoCreate: true}.Load()
	if err != nil || strings.Join(keys.Kids(), ",") != newKid+","+firstKid {
		t.Fatalf("after rotate: kids %v (%v), want %s,%s", keys.Kids(), err, newKid, firstKid)
	}
	if !strings.Contains(outputs["rotate"], "still verifying: "+firstKid) {
		t.Fatalf("rotate output: %s", outputs["rotate"])
	}

	// The printed settings are keys the settings accept.
	printed := map[string]string{}
	for _, line := range strings.Split(outputs["print"], "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			printed[k] = v
		}
	}
	for _, name := range []string{"JWT__SIGNING_KEY", "OTP__HMAC_KEY", "EVENTS__SIGNING_KEY"} {
		if printed[name] == "" {
			t.Fatalf("--print gave no %s:\n%s", name, outputs["print"])
		}
		t.Setenv(name, printed[name])
	}
	if code, stdout, msg := runCLI("config"); code != 0 || strings.Contains(stdout, printed["JWT__SIGNING_KEY"]) {
		t.Fatalf("cfgd config with the printed keys: exit %d %s %s", code, msg, stdout)
	}
}
