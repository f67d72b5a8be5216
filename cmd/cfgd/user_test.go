package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

func TestCreateSuperuserCommand(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	tests := []struct {
		args   []string
		code   int
		stderr string // in the error or on stderr
		stdout string
	}{
		{[]string{"user"}, 2, "cfgd user [command]", ""},
		{[]string{"user", "delete"}, 2, `unknown user command "delete"`, ""},
		{[]string{"user", "create-superuser"}, 2, "Email is required", ""},
		{[]string{"user", "create-superuser", "--email", ""}, 2, "Email is required", ""},
		{[]string{"user", "create-superuser", "--email", "  "}, 2, "Email is required", ""},
		{[]string{"user", "create-superuser", "--email", "nope"}, 2, "enter a valid e-mail address", ""},
		{[]string{"user", "create-superuser", "--email", "a@example.com", "--password", "short"}, 2, "at least 8 characters", ""},
		{[]string{"user", "create-superuser", "--bogus"}, 2, "unknown flag: --bogus", ""},
		{[]string{"user", "create-superuser", "--email", "a@example.com", "extra"}, 2, "takes no arguments", ""},
		{[]string{"user", "create-superuser", "--email", "Admin@Example.com", "--password", "long enough pw"}, 0, "", "superuser created: id=1 email=admin@example.com"},
		{[]string{"user", "create-superuser", "--email", "admin@example.com", "--password", "long enough pw"}, 1, "already exists", ""},
		{[]string{"user", "create-superuser", "--email", "otp-only@example.com"}, 0, "", "no password set"},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
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
		if code != tc.code || !strings.Contains(msg, tc.stderr) || !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("%q: exit %d (%v), stderr %q, stdout %q", tc.args, code, err, stderr.String(), stdout.String())
		}
	}
}
