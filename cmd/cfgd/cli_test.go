package main

import (
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/deploy/buildinfo"
)

// Every command answers --help (and help COMMAND) on stdout with exit 0
// and names its flags; the table must list every command of the tree.
func TestCLIHelp(t *testing.T) {
	baseEnv(t, "postgres://unused/cfgd")
	tests := []struct {
		path  string
		flags []string
	}{
		{"", []string{"--help", "--version"}},
		{"serve", nil},
		{"migrate", []string{"--dry-run"}},
		{"migrate status", nil},
		{"worker", nil},
		{"broker", nil},
		{"task", nil},
		{"task enqueue", []string{"--queue", "--type", "--payload"}},
		{"task list", []string{"--queue", "--state", "--limit", "--json"}},
		{"task inspect", []string{"--queue", "--json"}},
		{"task retry", []string{"--queue", "--json"}},
		{"task delete", []string{"--queue", "--json"}},
		{"task archive", []string{"--queue", "--json"}},
		{"user", nil},
		{"user create-superuser", []string{"--email", "--password"}},
		{"deadletters", nil},
		{"deadletters list", nil},
		{"replay", []string{"--all", "--list", "--batch"}},
		{"apikey", nil},
		{"apikey create", []string{"--name", "--type", "--user", "--expires"}},
		{"apikey revoke", []string{"--id"}},
		{"apikey list", []string{"--type", "--active", "--json"}},
		{"keys", nil},
		{"keys generate", []string{"--dir", "--print"}},
		{"keys rotate", []string{"--dir"}},
		{"config", []string{"--json"}},
		{"check", nil},
		{"completion", nil},
		{"completion bash", []string{"--no-descriptions"}},
		{"completion zsh", []string{"--no-descriptions"}},
		{"completion fish", []string{"--no-descriptions"}},
		{"completion powershell", []string{"--no-descriptions"}},
	}
	var listed []string
	for _, tc := range tests {
		listed = append(listed, tc.path)
		path := strings.Fields(tc.path)
		for _, args := range [][]string{append(slices.Clone(path), "--help"), append([]string{"help"}, path...)} {
			code, stdout, msg := runCLI(args...)
			if code != 0 || msg != "" || !strings.Contains(stdout, "Usage:\n  "+strings.TrimSpace("cfgd "+tc.path)) {
				t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, msg, stdout)
			}
			for _, f := range tc.flags {
				if !strings.Contains(stdout, f+" ") {
					t.Errorf("%q does not name %s:\n%s", args, f, stdout)
				}
			}
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if p := commandName(c); c.HasParent() && !slices.Contains(listed, p) {
			t.Errorf("command %q is missing from this test's table", p)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand(io.Discard, io.Discard))
}

func TestCLIVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-v"}} {
		code, stdout, msg := runCLI(args...)
		if code != 0 || msg != "" || !strings.HasPrefix(stdout, "cfgd version ") || !strings.Contains(stdout, "\ncommit ") || !strings.Contains(stdout, "\ndate ") {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, msg, stdout)
		}
	}
	stamped := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "b51f4e3"}, {Key: "vcs.time", Value: "2026-11-25T16:00:00Z"}, {Key: "vcs.modified", Value: "false"},
	}}
	modified := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "b51f4e3"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		// The version is the release (docs/changelog.md) whatever the
		// toolchain stamped as the module's version.
		{"stamped", stamped, true, buildinfo.Release + "\ncommit b51f4e3\ndate   2026-11-25T16:00:00Z"},
		{"modified tree, no time", modified, true, buildinfo.Release + "\ncommit b51f4e3 (modified)\ndate   unknown"},
		{"no vcs settings (-buildvcs=false)", &debug.BuildInfo{}, true, buildinfo.Release + "\ncommit unknown\ndate   unknown"},
		{"no build info", nil, false, buildinfo.Release + "\ncommit unknown\ndate   unknown"},
	}
	for _, tc := range tests {
		if got := versionText(buildinfo.From(tc.info, tc.ok)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	// docs/cli.md shows what an unstamped build (go run, -buildvcs=false,
	// a git worktree) prints: the release, and no commit.
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	unstamped := "cfgd version " + versionText(buildinfo.From(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true))
	if !strings.Contains(string(doc), unstamped) {
		t.Errorf("docs/cli.md does not show what an unstamped build prints:\n%s", unstamped)
	}
}

// A mistyped command or sub-command ends with exit 2 and one line that
// names the nearest commands.
func TestCLISuggestions(t *testing.T) {
	baseEnv(t, "postgres://unused/cfgd")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sever"}, `unknown command "sever"; did you mean "serve"?`},
		{[]string{"migarte"}, `did you mean "migrate"?`},
		{[]string{"sever", "--port", "1"}, `did you mean "serve"?`},
		{[]string{"--bogus"}, `unknown flag: --bogus (see cfgd --help)`},
		{[]string{"apikey", "--bogus", "create"}, `unknown flag: --bogus (see cfgd apikey --help)`},
		{[]string{"apikey", "crate"}, `unknown apikey command "crate"; did you mean "create"?`},
		{[]string{"apikey", "revok", "--id", "1"}, `did you mean "revoke"?`},
		{[]string{"user", "create-superusr"}, `did you mean "create-superuser"?`},
		{[]string{"user", "create"}, `did you mean "create-superuser"?`},
		{[]string{"task", "enqeue"}, `did you mean "enqueue"?`},
		{[]string{"deadletters", "lst"}, `did you mean "list"?`},
		{[]string{"completion", "zssh"}, `"zsh"`},
		{[]string{"help", "sever"}, `did you mean "serve"?`},
		{[]string{"help", "apikey", "crate"}, `did you mean "create"?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate" (see cfgd --help)`},
		{[]string{"apikey", "delete"}, `unknown apikey command "delete" (see cfgd apikey --help)`},
	}
	for _, tc := range tests {
		code, stdout, msg := runCLI(tc.args...)
		if code != 2 || stdout != "" || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") > 0 {
			t.Errorf("%q: exit %d, stdout %q, message %q; want exit 2 and the one line %q", tc.args, code, stdout, msg, tc.want)
		}
	}
}

func TestCLIDaysDuration(t *testing.T) {
	tests := []struct {
		in     string
		want   time.Duration
		ok     bool
		string string // the flag's String after Set
	}{
		{"30d", 30 * day, true, "30d"},
		{"1d12h", 36 * time.Hour, true, "36h0m0s"},
		{"1d30m15s", day + 30*time.Minute + 15*time.Second, true, "24h30m15s"},
		{"720h", 720 * time.Hour, true, "30d"},
		{"90m", 90 * time.Minute, true, "1h30m0s"},
		{"0d", 0, true, "0"},
		{"0", 0, true, "0"},
		{"+2d", 2 * day, true, "2d"},
		{"-1d", -day, true, "-1d"},
		{"-1h", -time.Hour, true, "-1h0m0s"},
		{"106751d", 106751 * day, true, "106751d"},
		{"106752d", 0, false, ""}, // beyond time.Duration
		{"106751d24h", 0, false, ""},
		{"soon", 0, false, ""},
		{"", 0, false, ""},
		{"d", 0, false, ""},
		{"1.5d", 0, false, ""},
		{"1d-2h", 0, false, ""},
		{"1dd", 0, false, ""},
		{"--1d", 0, false, ""},
		{"1 d", 0, false, ""},
	}
	for _, tc := range tests {
		var d time.Duration
		v := newDaysDuration(&d)
		err := v.Set(tc.in)
		if (err == nil) != tc.ok || d != tc.want {
			t.Errorf("%q: got %v, %v; want %v (ok %v)", tc.in, d, err, tc.want, tc.ok)
			continue
		}
		if tc.ok && v.String() != tc.string {
			t.Errorf("%q: String() = %q, want %q", tc.in, v.String(), tc.string)
		}
	}
	// Through the command: days are read, a non-positive lifetime is
	// refused, all before any setting is read.
	baseEnv(t, "postgres://unused/cfgd")
	create := []string{"apikey", "create", "--name", "x", "--type", "root", "--user", "a@example.com"}
	for _, tc := range []struct {
		expires, want string
	}{
		{"30d", "--type: must be one of"},
		{"1d12h", "--type: must be one of"},
		{"0d", "--expires: a positive duration such as 720h or 30d is required, got 0"},
		{"-2d", "got -2d"},
		{"1.5d", `invalid argument "1.5d" for "--expires" flag: expected a duration such as 720h, 30d or 1d12h`},
	} {
		if code, _, msg := runCLI(append(create, "--expires", tc.expires)...); code != 2 || !strings.Contains(msg, tc.want) {
			t.Errorf("--expires %s: exit %d, %q; want %q", tc.expires, code, msg, tc.want)
		}
	}
}

// The spellings of the standard flag package cfgd parsed with before
// still work, and name the new one.
func TestCLIOldSpellings(t *testing.T) {
	baseEnv(t, "postgres://unused/cfgd")
	tests := []struct {
		args   []string
		code   int
		msg    []string // in stderr or the error
		notMsg string
		stdout string
	}{
		{[]string{"apikey", "create", "-name", "x", "-type", "root", "-user", "a@example.com"}, 2,
			[]string{"-name is now spelled --name", "-type is now spelled --type", "--type: must be one of"}, "", ""},
		{[]string{"apikey", "create", "-name=x", "-type=cli", "-user=nope"}, 2, []string{"-user is now spelled --user", "--user: enter a valid e-mail address"}, "", ""},
		{[]string{"user", "create-superuser", "-email", "nope"}, 2, []string{"-email is now spelled --email", "enter a valid e-mail address"}, "", ""},
		{[]string{"replay", "-all", "-list"}, 2, []string{"-all is now spelled --all", "one of them"}, "", ""},
		{[]string{"replay", "-batch", "0", "identity.users"}, 2, []string{"batch size 0"}, "", ""},
		{[]string{"task", "enqueue", "-type", "nope"}, 2, []string{`unknown task type "nope"`}, "", ""},
		// A value that looks like a flag stays a value.
		{[]string{"user", "create-superuser", "--email", "a@example.com", "--password", "-email"}, 2, []string{"at least 8 characters"}, "is now spelled", ""},
		{[]string{"apikey", "create", "-help"}, 0, nil, "", "--expires"},
		{[]string{"apikey", "help"}, 0, nil, "", "revoke"},
		{[]string{"user", "-h"}, 0, nil, "", "create-superuser"},
		{[]string{"task", "--help"}, 0, nil, "", "enqueue"},
		{[]string{"help"}, 0, nil, "", "serve"},
		{[]string{"-h"}, 0, nil, "", "replay"},
	}
	for _, tc := range tests {
		code, stdout, msg := runCLI(tc.args...)
		ok := code == tc.code && strings.Contains(stdout, tc.stdout) && (tc.notMsg == "" || !strings.Contains(msg, tc.notMsg))
		for _, m := range tc.msg {
			ok = ok && strings.Contains(msg, m)
		}
		if !ok {
			t.Errorf("%q: exit %d, message %q, stdout %q", tc.args, code, msg, stdout)
		}
	}
}

// completion prints a script for each shell, and the scripts' requests
// complete commands, flags and projection names.
func TestCLICompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, stdout, msg := runCLI("completion", shell); code != 0 || msg != "" || !strings.Contains(stdout, "cfgd") {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, msg, len(stdout))
		}
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", ""}, []string{"serve", "apikey", "replay", "completion"}},
		{[]string{"__complete", "apikey", ""}, []string{"create", "revoke"}},
		{[]string{"__complete", "apikey", "create", "--ex"}, []string{"--expires"}},
	}
	for _, tc := range tests {
		code, stdout, msg := runCLI(tc.args...)
		ok := code == 0
		for _, w := range tc.want {
			ok = ok && (strings.HasPrefix(stdout, w) || strings.Contains(stdout, "\n"+w))
		}
		if !ok {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", tc.args, code, msg, stdout)
		}
	}
}
