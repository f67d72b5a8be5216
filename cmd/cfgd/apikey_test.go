package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

func TestAPIKeyCommands(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	baseEnv(t, pgURL)
	runCLI := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		code := 0
		ee := (*exitError)(nil)
		switch {
		case errors.As(err, &ee):
			code = ee.code
		case err != nil:
			code = 1
		}
		msg := stderr.String()
		if err != nil && (ee == nil || ee.err != nil) {
			msg += err.Error()
		}
		return code, stdout.String(), msg
	}
	if code, _, msg := runCLI("user", "create-superuser", "--email", "keys@example.com"); code != 0 {
		t.Fatalf("create-superuser: %d %s", code, msg)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string
		stdout string
	}{
		{[]string{"apikey"}, 2, "cfgd apikey [command]", ""},
		{[]string{"apikey", "delete"}, 2, `unknown apikey command "delete"`, ""},
		{[]string{"apikey", "create"}, 2, "--name: is required", ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "root", "--user", "keys@example.com"}, 2, "--type: must be one of", ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "cli", "--user", "nope"}, 2, "--user: enter a valid e-mail address", ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "cli", "--user", "keys@example.com", "--expires", "-1h"}, 2, "--expires", ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "cli", "--user", "keys@example.com", "--expires", "soon"}, 2, `invalid argument "soon" for "--expires"`, ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "cli", "--user", "keys@example.com", "--id", "3"}, 2, "unknown flag: --id", ""},
		{[]string{"apikey", "create", "--name", "x", "--type", "cli", "--user", "nobody@example.com"}, 1, "no active user", ""},
		{[]string{"apikey", "revoke"}, 2, "--id: a positive key id is required", ""},
		{[]string{"apikey", "revoke", "--id", "1", "--name", "x"}, 2, "unknown flag: --name", ""},
		{[]string{"apikey", "revoke", "--id", "999"}, 1, "no such API key", ""},
		{[]string{"apikey", "create", "--name", "ci", "--type", "cli", "--user", "KEYS@example.com", "--expires", "720h"}, 0, "", "API key created: id="},
	}
	for _, tc := range tests {
		code, stdout, msg := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(msg, tc.stderr) || !strings.Contains(stdout, tc.stdout) {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", tc.args, code, msg, stdout)
		}
	}
	code, stdout, msg := runCLI("apikey", "create", "--name", "svc", "--type", "service", "--user", "keys@example.com")
	key := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(stdout)
	if code != 0 || key == "" || !strings.Contains(stdout, "expires=never") {
		t.Fatalf("create: %d %q %q", code, stdout, msg)
	}
	id := regexp.MustCompile(`id=(\d+)`).FindStringSubmatch(stdout)[1]
	if code, stdout, msg := runCLI("apikey", "revoke", "--id", id); code != 0 || !strings.Contains(stdout, "API key revoked: id="+id) {
		t.Fatalf("revoke: %d %q %q", code, stdout, msg)
	}
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE stream_id = 'apikey-'||$1 AND strpos(data::text, $2) = 0`, id, key).Scan(&n); err != nil || n != 2 {
		t.Fatalf("events of the key: %d %v", n, err)
	}
}

// apikey list reads the read model that serve's projection fills: the key
// shows masked, as a table and as JSON, and never whole.
func TestAPIKeyListCommand(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	if code, _, msg := runCLI("user", "create-superuser", "--email", "lister@example.com"); code != 0 {
		t.Fatalf("create-superuser: %d %s", code, msg)
	}
	code, stdout, msg := runCLI("apikey", "create", "--name", "lister-ci", "--type", "cli", "--user", "lister@example.com")
	key := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(stdout)
	if code != 0 || key == "" {
		t.Fatalf("create: %d %q %q", code, stdout, msg)
	}
	start(t)
	var keys []struct {
		Name      string `json:"name"`
		MaskedKey string `json:"masked_key"`
		UserEmail string `json:"user_email"`
		IsActive  bool   `json:"is_active"`
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && len(keys) == 0; time.Sleep(100 * time.Millisecond) {
		code, stdout, msg = runCLI("apikey", "list", "--json")
		if code != 0 {
			t.Fatalf("list --json: %d %s", code, msg)
		}
		if err := json.Unmarshal([]byte(stdout), &keys); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
	}
	if len(keys) != 1 || keys[0].Name != "lister-ci" || keys[0].UserEmail != "lister@example.com" || !keys[0].IsActive ||
		keys[0].MaskedKey == "" || strings.Contains(stdout, key) {
		t.Fatalf("list --json: %s", stdout)
	}
	code, stdout, _ = runCLI("apikey", "list", "--active")
	if code != 0 || !strings.HasPrefix(stdout, "ID ") || !strings.Contains(stdout, "lister-ci") || !strings.Contains(stdout, keys[0].MaskedKey) || strings.Contains(stdout, key) {
		t.Fatalf("list: %d %s", code, stdout)
	}
	if code, stdout, _ = runCLI("apikey", "list", "--type", "service"); code != 0 || strings.Contains(stdout, "lister-ci") {
		t.Fatalf("list --type service: %d %s", code, stdout)
	}
}

// A one-shot command names the dependency that does not answer, and the
// next step, within a few seconds.
func TestCommandsFailFastOnAMissingDependency(t *testing.T) {
	baseEnv(t, "postgres://postgres@127.0.0.1:1/cfgd")
	t.Setenv("REDIS__URL", "redis://127.0.0.1:1/0")
	t.Setenv("KAFKA__EMBEDDED_ADDR", "127.0.0.1:1")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"migrate"}, "postgres at 127.0.0.1:1 (POSTGRES__URL) is not reachable"},
		{[]string{"apikey", "list"}, "is it running?"},
		{[]string{"user", "create-superuser", "--email", "a@example.com"}, "postgres at 127.0.0.1:1"},
		{[]string{"task", "enqueue", "--type", "demo:echo"}, "redis at redis://127.0.0.1:1/0 (TASKS__REDIS_URL) is not reachable"},
		{[]string{"deadletters", "list"}, "is `cfgd serve` (or `cfgd broker`) running?"},
	}
	for _, tc := range tests {
		began := time.Now()
		code, _, msg := runCLI(tc.args...)
		if code == 0 || !strings.Contains(msg, tc.want) || time.Since(began) > 2*reachWithin {
			t.Errorf("%q: exit %d after %s, %q; want a message with %q within %s", tc.args, code, time.Since(began), msg, tc.want, 2*reachWithin)
		}
	}
}
