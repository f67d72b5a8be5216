package main

import (
	"encoding/json"
	"strings"
	"testing"

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
