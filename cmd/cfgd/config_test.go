package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/config"
)

// recording is a Source that remembers every name read.
type recording struct {
	*config.Source
	read map[string]bool
}

func (r recording) Lookup(name string) (string, bool) {
	r.read[name] = true
	return r.Source.Lookup(name)
}

// Every variable cfgd reads at start-up, extensions included, is in the
// settings table: otherwise `cfgd check` would call a real setting unknown
// and docs/settings.md would miss it.
func TestEveryVariableReadIsInTheTable(t *testing.T) {
	env := map[string]string{"EXTENSIONS__ENABLED": "payments,leads,support,newsletter"}
	rec := recording{Source: config.FromMaps(env, nil), read: map[string]bool{}}
	if _, err := readApp(config.NewReader(rec)); err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, s := range settings.Table() {
		for _, v := range s.Settings {
			inTable[v.Name] = true
		}
	}
	for name := range rec.read {
		if !inTable[name] {
			t.Errorf("%s is read but not in settings.Table", name)
		}
	}
}

func TestCLIConfigAndCheck(t *testing.T) {
	baseEnv(t, "postgres://db.example/cfgd")
	t.Setenv("REDIS__URL", "redis://127.0.0.1:6399/2")
	t.Setenv("KAFKA__SASL_PASSWORD", "hunter2-secret")

	code, out, msg := runCLI("check")
	if code != 0 || !strings.HasPrefix(out, "settings ok") || !strings.Contains(out, "CLICKHOUSE__URL") || strings.Contains(out, "REDIS__URL") {
		t.Errorf("check: exit %d, stdout %q, stderr %q", code, out, msg)
	}

	code, out, msg = runCLI("config", "--json")
	if code != 0 {
		t.Fatalf("config: exit %d, %s", code, msg)
	}
	var got struct {
		Settings []configLine `json:"settings"`
		Unknown  []string     `json:"unknown"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]configLine{
		"POSTGRES__URL":        {Name: "POSTGRES__URL", Value: "postgres://db.example/cfgd", Source: config.FromEnvironment},
		"CLICKHOUSE__URL":      {Name: "CLICKHOUSE__URL", Value: settings.DefaultCore().ClickHouseURL, Source: config.FromDefault},
		"KAFKA__SASL_PASSWORD": {Name: "KAFKA__SASL_PASSWORD", Value: config.Masked, Source: config.FromEnvironment, Secret: true},
	}
	for _, l := range got.Settings {
		if w, ok := want[l.Name]; ok {
			if l != w {
				t.Errorf("config: %+v, want %+v", l, w)
			}
			delete(want, l.Name)
		}
	}
	if len(want) > 0 || strings.Contains(out, "hunter2") {
		t.Errorf("config misses %v or shows a secret:\n%s", want, out)
	}

	// A typo: reported by config, refused by check and by CFGD_STRICT=1,
	// a warning otherwise.
	t.Setenv("POSTGRES__ULR", "postgres://other/cfgd")
	_, out, _ = runCLI("config")
	if !strings.Contains(out, "POSTGRES__ULR is not a cfgd setting; did you mean POSTGRES__URL?") {
		t.Errorf("config does not report the typo:\n%s", out)
	}
	if code, _, msg := runCLI("check"); code != 2 || !strings.Contains(msg, "did you mean POSTGRES__URL?") {
		t.Errorf("check with a typo: exit %d, %q", code, msg)
	}
	t.Setenv("CFGD_STRICT", "1")
	if code, _, msg := runCLI("migrate"); code != 2 || !strings.Contains(msg, "did you mean POSTGRES__URL?") {
		t.Errorf("strict migrate with a typo: exit %d, %q", code, msg)
	}
}

// No command shows the password of a connection setting: not `cfgd
// config` (table or JSON), not the error line of a value cfgd refuses, not
// the error of a driver that could not read one, not the "not reachable"
// line; in the user:pass@ form, as ?password= and as a keyword string.
func TestNoCommandShowsAConnectionPassword(t *testing.T) {
	const secret = "SECRETpw"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"config", map[string]string{
			"POSTGRES__URL":    "postgres://cfgd:" + secret + "@127.0.0.1:5432/cfgd?sslmode=disable",
			"CLICKHOUSE__URL":  "clickhouse://cfgd:" + secret + "@127.0.0.1:9000/cfgd",
			"REDIS__URL":       "redis://:" + secret + "@127.0.0.1:6379/0",
			"TASKS__REDIS_URL": "redis://default:" + secret + "@127.0.0.1:6379/1",
		}, []string{"config"}, 0},
		{"config json, query passwords", map[string]string{
			"POSTGRES__URL":   "postgres://cfgd@127.0.0.1:5432/cfgd?password=" + secret,
			"CLICKHOUSE__URL": "clickhouse://127.0.0.1:9000/cfgd?username=cfgd&password=" + secret,
		}, []string{"config", "--json"}, 0},
		{"check, bad port", map[string]string{"POSTGRES__URL": "postgres://u:" + secret + "@127.0.0.1:notaport/db"}, []string{"check"}, 2},
		{"check, keyword string", map[string]string{"POSTGRES__URL": "host=127.0.0.1 user=u password=" + secret + " dbname=d"}, []string{"check"}, 2},
		{"config, bad redis", map[string]string{"TASKS__REDIS_URL": "redis://u:" + secret + "@r:port/0"}, []string{"config"}, 2},
		{"check, wrong scheme", map[string]string{"REDIS__URL": "http://u:" + secret + "@127.0.0.1:6379/0"}, []string{"check"}, 2},
		{"driver refuses", map[string]string{"POSTGRES__URL": "postgres://u:" + secret + "@127.0.0.1/db?sslmode=bogus"}, []string{"migrate"}, 1},
		{"redis unreachable", map[string]string{"TASKS__REDIS_URL": "redis://:" + secret + "@127.0.0.1:1/0"}, []string{"task", "list"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baseEnv(t, "postgres://127.0.0.1/cfgd")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, msg := runCLI(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d: %s%s", code, tc.code, out, msg)
			}
			if strings.Contains(out+msg, secret) {
				t.Errorf("the password is shown:\n%s%s", out, msg)
			}
		})
	}
}

// cliWarning is what a one-shot command prints on stderr for a mistyped
// setting; docs/settings.md quotes it.
const cliWarning = `level=WARN msg="unknown setting" name=POSTGRES__ULR did_you_mean=POSTGRES__URL hint="set CFGD_STRICT=1 to refuse unknown settings"`

// A one-shot command that goes well says nothing on stderr (it used to
// log a JSON INFO line, "using built-in defaults", on every call); a
// warning is one text line; LOG__LEVEL, when set, shows more.
func TestCLICommandsLogOnlyWarningsAsText(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t)) // ClickHouse and Redis at their built-in defaults
	for _, args := range [][]string{{"apikey", "list"}, {"task", "list", "--queue", "cli-log-test"}} {
		if code, _, msg := runCLI(args...); code != 0 || msg != "" {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", args, code, msg)
		}
	}
	t.Setenv("POSTGRES__ULR", "postgres://typo/cfgd")
	if code, _, msg := runCLI("apikey", "list"); code != 0 || msg != cliWarning+"\n" {
		t.Errorf("with a typo: exit %d, stderr %q; want %q", code, msg, cliWarning)
	}
	doc, err := os.ReadFile("../../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), cliWarning) {
		t.Errorf("docs/settings.md does not quote the warning a command prints: %s", cliWarning)
	}
	t.Setenv("LOG__LEVEL", "info")
	if _, _, msg := runCLI("apikey", "list"); !strings.Contains(msg, `level=INFO msg="using built-in defaults`) {
		t.Errorf("LOG__LEVEL=info: stderr %q", msg)
	}
}
