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

func TestEventMaxBytes(t *testing.T) {
	tests := []struct {
		value string
		want  int
		bad   bool
	}{
		{"", 900 << 10, false},
		{"65536", 65536, false},
		{"100", 0, true},
		{"2000000", 0, true}, // above what the producer carries
	}
	for _, tc := range tests {
		env := map[string]string{}
		if tc.value != "" {
			env["EVENTS__MAX_BYTES"] = tc.value
		}
		r := config.NewReader(config.FromMaps(env, nil))
		c := ReadCore(r)
		if tc.bad != (r.Err() != nil) || (!tc.bad && c.EventMaxBytes != tc.want) {
			t.Errorf("%q: %d, %v", tc.value, c.EventMaxBytes, r.Err())
		}
	}
}

// REPLICA__ID becomes part of Kafka's group.instance.id, which allows few
// characters: anything else is refused at start-up, not by the broker.
func TestReplicaID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"web-1", true},
		{"pod_2.eu-west", true},
		{"a b", false},
		{"web/1", false},
		{strings.Repeat("x", 101), false},
	} {
		r := config.NewReader(config.FromMaps(map[string]string{"REPLICA__ID": tc.id}, nil))
		c := ReadCore(r)
		if err := r.Err(); (err == nil) != tc.ok {
			t.Errorf("REPLICA__ID=%q: error %v, want ok=%v", tc.id, err, tc.ok)
		} else if tc.ok && c.ReplicaID != tc.id {
			t.Errorf("REPLICA__ID=%q read as %q", tc.id, c.ReplicaID)
		}
	}
}

// METRICS__PPROF serves the profiles on the metrics listener only: without
// METRICS__ADDR (the public HTTP__ADDR would serve them) it is refused at
// start-up.
func TestMetricsPprofNeedsItsOwnListener(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
		ok   bool
	}{
		{map[string]string{}, false, true},
		{map[string]string{"METRICS__PPROF": "true", "METRICS__ADDR": "127.0.0.1:9090"}, true, true},
		{map[string]string{"METRICS__PPROF": "true"}, false, false},
		{map[string]string{"METRICS__PPROF": "maybe", "METRICS__ADDR": "127.0.0.1:9090"}, false, false},
	} {
		r := config.NewReader(config.FromMaps(tc.env, nil))
		c := ReadCore(r)
		if err := r.Err(); (err == nil) != tc.ok {
			t.Errorf("%v: error %v, want ok=%v", tc.env, err, tc.ok)
		} else if tc.ok && c.MetricsPprof != tc.want {
			t.Errorf("%v: MetricsPprof %v, want %v", tc.env, c.MetricsPprof, tc.want)
		}
	}
}
