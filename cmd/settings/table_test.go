package settings

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/api/rest/media"
	"github.com/cfgd/cfgd/api/rest/profile"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
)

func TestEmptyEnvironmentGivesEachDefaultConfig(t *testing.T) {
	r := config.NewReader(config.FromMaps(nil, nil))
	wantTasks := taskqueues.DefaultConfig()
	wantTasks.RedisURL = "redis://core:6379/2"
	signinCfg, _ := ReadSignin(r, DefaultCore().HTTPAddr)
	tests := []struct {
		name      string
		got, want any
	}{
		{"core", ReadCore(r), DefaultCore()},
		{"signin", signinCfg, signin.DefaultConfig()},
		{"media", ReadMedia(r), media.DefaultConfig()},
		{"profile", ReadProfile(r), profile.DefaultConfig()},
		{"tasks", ReadTasks(r, "redis://core:6379/2"), wantTasks},
		{"requestlog", ReadRequestLog(r), RequestLog{Producer: requestlogkafka.DefaultProducerConfig(kafka.Config{}), Sink: sinks.DefaultRequestLogConfig(kafka.Config{})}},
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, tc.got, tc.want)
		}
	}
}

// docsTable is the part of docs/settings.md that Markdown renders.
var docsTable = regexp.MustCompile(`(?s)<!-- settings table: begin.*?-->\n(.*?)<!-- settings table: end -->`)

// TestDocsTableIsTheCodesTable holds docs/settings.md to Table: the same
// names in the same order with the same defaults and help. Run with
// CFGD_UPDATE_DOCS=1 to write the code's table into the file.
func TestDocsTableIsTheCodesTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "settings.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := docsTable.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s: no settings table markers", path)
	}
	want := Markdown()
	if os.Getenv("CFGD_UPDATE_DOCS") == "1" {
		out := string(doc[:m[2]]) + want + string(doc[m[3]:])
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got := string(doc[m[2]:m[3]])
	docRows, codeRows := rows(got), rows(want)
	for name, def := range codeRows {
		if d, ok := docRows[name]; !ok {
			t.Errorf("%s is read by the code but missing from %s", name, path)
		} else if d != def {
			t.Errorf("%s: default %s in %s, %s in the code", name, d, path, def)
		}
	}
	for name := range docRows {
		if _, ok := codeRows[name]; !ok {
			t.Errorf("%s is in %s but the code does not read it", name, path)
		}
	}
	if got != want {
		t.Errorf("%s differs from settings.Markdown() (order or help text); CFGD_UPDATE_DOCS=1 go test ./cmd/settings/ rewrites it", path)
	}
}

// rows maps each variable of a rendered table to its default column.
func rows(md string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(md, "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 3 || !strings.HasPrefix(cells[0], "| `") {
			continue
		}
		out[strings.Trim(cells[0], "| `")] = cells[1]
	}
	return out
}

func TestTableNames(t *testing.T) {
	name := regexp.MustCompile(`^[A-Z][A-Z0-9_]*[A-Z0-9]__[A-Z0-9_]+$`)
	seen := map[string]bool{}
	for _, s := range Table() {
		for _, v := range s.Settings {
			if !name.MatchString(v.Name) || seen[v.Name] {
				t.Errorf("%s: not SECTION__VARIABLE or listed twice", v.Name)
			}
			seen[v.Name] = true
			if v.Help == "" {
				t.Errorf("%s has no help", v.Name)
			}
		}
	}
}

func TestCurrentShowsValuesAndMasksSecrets(t *testing.T) {
	const key = "0123456789-0123456789-0123456789-signing"
	r := config.NewReader(config.FromMaps(map[string]string{"EVENTS__SIGNING_KEY": key, "KAFKA__PARTITIONS": "3", "REDIS__URL": "redis://x:1/0"}, nil))
	vals := Current(r)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Value{}
	for _, v := range vals {
		if strings.Contains(v.Value, key) {
			t.Fatalf("%s shows the secret", v.Name)
		}
		byName[v.Name] = v
	}
	for name, want := range map[string]Value{
		"EVENTS__SIGNING_KEY": {Value: config.Masked, Set: true},
		"KAFKA__PARTITIONS":   {Value: "3", Set: true},
		"HTTP__ADDR":          {Value: DefaultCore().HTTPAddr},
		"TASKS__REDIS_URL":    {Value: "redis://x:1/0"},
		"JWT__ACCESS_TTL":     {Value: "15m"},
	} {
		if got := byName[name]; got.Value != want.Value || got.Set != want.Set {
			t.Errorf("%s: got %q set=%v, want %q set=%v", name, got.Value, got.Set, want.Value, want.Set)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 500 * time.Millisecond: "500ms", 10 * time.Second: "10s", 15 * time.Minute: "15m",
		168 * time.Hour: "168h", 90 * time.Minute: "1h30m", 61 * time.Second: "1m1s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("%v: got %q, want %q", d, got, want)
		}
	}
}
