package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/config"
)

// No Docker engine runs where the tests run, so deploy/docker-compose.yml
// is checked statically: what would otherwise only fail at `docker compose
// up` (or, worse, run with a default: a misspelled setting is ignored by
// cfgd with a warning) fails here.

const (
	composePath    = "../../deploy/docker-compose.yml"
	dockerfilePath = "../../deploy/Dockerfile"
)

// composeFile is the part of a compose file the checks read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string   `yaml:"image"`
	Build       any      `yaml:"build"`
	Command     []string `yaml:"command"`
	Environment any      `yaml:"environment"`
	Volumes     []any    `yaml:"volumes"`
	Ports       []any    `yaml:"ports"`
	DependsOn   any      `yaml:"depends_on"`
}

// stateDirs says where each image of the stack keeps its state: that
// directory must be a named volume, so that recreating a container (an
// upgrade, `docker compose up` after a change) loses nothing. "" marks an
// image without state. An image missing here is a problem: whoever adds a
// service says where its state lives.
var stateDirs = map[string]string{
	"apache/kafka":                 "/var/lib/kafka/data",
	"postgres":                     "/var/lib/postgresql/data",
	"clickhouse/clickhouse-server": "/var/lib/clickhouse",
	"clickhouse/clickhouse-keeper": "/var/lib/clickhouse-keeper",
	"redis":                        "/data",
	"haproxy":                      "",
}

// fullVersion is a tag naming one patch release (7.4.1, 24.8.4.13),
// optionally with a variant suffix (-bookworm, -slim).
var fullVersion = regexp.MustCompile(`^v?\d+\.\d+(\.\d+)+([-_][A-Za-z0-9.-]+)?$`)

// twoPartVersion is the same for projects whose releases are major.minor
// (Postgres 16.10, Debian 12.12): there the second number is the patch.
var twoPartVersion = regexp.MustCompile(`^\d+\.\d+([-_][A-Za-z0-9.-]+)?$`)

var twoPartReleases = map[string]bool{"postgres": true, "debian": true}

// pinned tells whether an image reference names one release: a tag that is
// a full version, optionally with a sha256 digest. `latest`, no tag, a bare
// major (`redis:7`) or a release line (`golang:1.26`) move under the
// deployment without a change to this file.
func pinned(ref string) error {
	_, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !strings.HasPrefix(digest, "sha256:") {
		return fmt.Errorf("image %s: digest must be sha256", ref)
	}
	name, _, _ := strings.Cut(ref, "@")
	colon := strings.LastIndex(name, ":")
	if colon < strings.LastIndex(name, "/")+1 {
		return fmt.Errorf("image %s has no tag: pin a full version (e.g. redis:7.4.1)", ref)
	}
	tag := name[colon+1:]
	if fullVersion.MatchString(tag) || twoPartReleases[repository(ref)] && twoPartVersion.MatchString(tag) {
		return nil
	}
	return fmt.Errorf("image %s is not pinned: tag %q is not a full version (e.g. redis:7.4.1)", ref, tag)
}

// repository is an image reference without tag and digest.
func repository(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	if colon := strings.LastIndex(name, ":"); colon > strings.LastIndex(name, "/") {
		name = name[:colon]
	}
	return name
}

// environment reads a service's environment in either compose form (a map,
// or a list of NAME=value).
func environment(v any) (map[string]string, error) {
	out := map[string]string{}
	switch e := v.(type) {
	case nil:
	case map[string]any:
		for k, val := range e {
			if val == nil {
				out[k] = ""
				continue
			}
			out[k] = fmt.Sprint(val)
		}
	case []any:
		for _, item := range e {
			s, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("environment entry %v is not NAME=value", item)
			}
			k, val, _ := strings.Cut(s, "=")
			out[k] = val
		}
	default:
		return nil, fmt.Errorf("environment is neither a map nor a list")
	}
	return out, nil
}

// mount is one entry of a service's volumes: source (a named volume, or a
// path for a bind mount) and target.
func mount(v any) (source, target string, err error) {
	switch m := v.(type) {
	case string:
		parts := strings.Split(m, ":")
		if len(parts) < 2 {
			return "", m, nil // anonymous volume
		}
		return parts[0], parts[1], nil
	case map[string]any:
		s, _ := m["source"].(string)
		t, _ := m["target"].(string)
		return s, t, nil
	}
	return "", "", fmt.Errorf("volume entry %v is neither short nor long syntax", v)
}

// knownSettings is every variable name of settings.Table.
func knownSettings() map[string]bool {
	known := map[string]bool{}
	for _, s := range settings.Table() {
		for _, v := range s.Settings {
			known[v.Name] = true
		}
	}
	return known
}

// checkCfgdEnv reports every variable of a cfgd service that is not a
// cfgd setting (with settings.FindUnknown's nearest name when it has one)
// and every value cfgd would refuse at start-up, read as serve reads it.
func checkCfgdEnv(service string, env map[string]string) []string {
	var out []string
	known := knownSettings()
	src := config.FromMaps(env, nil)
	nearest := map[string]string{}
	for _, u := range settings.FindUnknown(src) {
		nearest[u.Name] = u.Nearest
	}
	for _, name := range src.Names() {
		if known[name] {
			continue
		}
		u := settings.Unknown{Name: name, Nearest: nearest[name]}
		out = append(out, fmt.Sprintf("service %s: %s", service, u))
	}
	r := config.NewReader(src)
	if _, err := readApp(r); err != nil {
		out = append(out, fmt.Sprintf("service %s: %v", service, err))
	}
	if err := r.Err(); err != nil {
		for _, e := range splitJoined(err) {
			out = append(out, fmt.Sprintf("service %s: %v", service, e))
		}
	}
	return out
}

func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// checkCompose returns every problem of a compose file (and the Dockerfile
// its cfgd services are built from); none means it is fit to start.
// baseDir is the compose file's directory: bind-mounted files must exist.
func checkCompose(doc, dockerfile []byte, baseDir string) []string {
	var f composeFile
	if err := yaml.Unmarshal(doc, &f); err != nil {
		return []string{fmt.Sprintf("does not parse: %v", err)}
	}
	if len(f.Services) == 0 {
		return []string{"no services"}
	}
	var out []string
	problem := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	names := make([]string, 0, len(f.Services))
	for name := range f.Services {
		names = append(names, name)
	}
	slices.Sort(names)

	var serve, migrate, published []string
	var brokers []string
	images := map[string][]string{} // repository -> services
	for _, name := range names {
		s := f.Services[name]
		env, err := environment(s.Environment)
		if err != nil {
			problem("service %s: %v", name, err)
			continue
		}
		if len(s.Ports) > 0 {
			published = append(published, name)
		}
		mounts := map[string]string{} // target -> source
		for _, v := range s.Volumes {
			src, dst, err := mount(v)
			if err != nil {
				problem("service %s: %v", name, err)
				continue
			}
			mounts[dst] = src
			if strings.HasPrefix(src, "./") || strings.HasPrefix(src, "../") {
				if _, err := os.Stat(filepath.Join(baseDir, src)); err != nil {
					problem("service %s mounts %s, which does not exist", name, src)
				}
			}
		}
		namedVolumeAt := func(dir string) bool {
			src, ok := mounts[dir]
			_, declared := f.Volumes[src]
			return ok && declared
		}

		if s.Build != nil {
			// A cfgd process: its image is built from deploy/Dockerfile
			// (checked below), its environment is cfgd's settings.
			out = append(out, checkCfgdEnv(name, env)...)
			if len(s.Command) > 0 {
				switch s.Command[0] {
				case "serve":
					serve = append(serve, name)
				case "migrate":
					migrate = append(migrate, name)
				}
			}
			if b := env["KAFKA__BROKERS"]; b != "" {
				brokers = strings.Split(b, ",")
			}
			for _, dir := range []string{"AUTH__KEYS_DIR", "MEDIA__DIR"} {
				if env[dir] == "" || !namedVolumeAt(env[dir]) {
					problem("service %s: %s must be set to a named volume shared by every cfgd process", name, dir)
				}
			}
			continue
		}

		if s.Image == "" {
			problem("service %s has neither image nor build", name)
			continue
		}
		if err := pinned(s.Image); err != nil {
			problem("service %s: %v", name, err)
		}
		repo := repository(s.Image)
		images[repo] = append(images[repo], name)
		dir, ok := stateDirs[repo]
		switch {
		case !ok:
			problem("service %s: image %s is not in stateDirs: say where its state lives", name, repo)
		case dir != "" && !namedVolumeAt(dir):
			problem("service %s keeps state in %s: mount a named volume there", name, dir)
		}
	}

	if len(serve) != 2 {
		problem("want two cfgd replicas (command serve), have %d: %v", len(serve), serve)
	}
	if len(migrate) != 1 {
		problem("want one `cfgd migrate` job, have %d: %v", len(migrate), migrate)
	}
	for _, name := range serve {
		deps, _ := f.Services[name].DependsOn.(map[string]any)
		for _, m := range migrate {
			d, _ := deps[m].(map[string]any)
			if d["condition"] != "service_completed_successfully" {
				problem("service %s must start after %s completed successfully (DDL runs only there)", name, m)
			}
		}
	}
	if len(published) != 1 || slices.Contains(serve, published[0]) {
		problem("want one published port, on the proxy in front of the replicas; services with ports: %v", published)
	}
	if len(brokers) != 3 {
		problem("KAFKA__BROKERS lists %d brokers, want 3: %v", len(brokers), brokers)
	}
	for _, b := range brokers {
		host, _, _ := strings.Cut(b, ":")
		if !slices.Contains(images["apache/kafka"], host) {
			problem("KAFKA__BROKERS names %s, which is not a Kafka service", host)
		}
	}
	if n := len(images["clickhouse/clickhouse-server"]); n != 2 {
		problem("want two ClickHouse replicas, have %d", n)
	}

	sc := bufio.NewScanner(bytes.NewReader(dockerfile))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && strings.EqualFold(fields[0], "FROM") {
			if err := pinned(fields[1]); err != nil {
				problem("Dockerfile: %v", err)
			}
		}
	}
	return out
}

func readComposeFiles(t *testing.T) (doc, dockerfile []byte) {
	t.Helper()
	doc, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err = os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	return doc, dockerfile
}

// The compose file as committed has no problem; each broken variant of it
// is caught with a message that says what to fix.
func TestComposeFile(t *testing.T) {
	doc, dockerfile := readComposeFiles(t)
	if problems := checkCompose(doc, dockerfile, filepath.Dir(composePath)); len(problems) > 0 {
		t.Fatalf("deploy/docker-compose.yml:\n%s", strings.Join(problems, "\n"))
	}

	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"misspelled setting", "POSTGRES__URL:", "POSTGRES__ULR:", "POSTGRES__ULR is not a cfgd setting; did you mean POSTGRES__URL?"},
		{"unknown section", "EMAIL__BACKEND: console", "EMAILS__BACKEND: console", "EMAILS__BACKEND is not a cfgd setting"},
		{"bad value", `KAFKA__PARTITIONS: "12"`, `KAFKA__PARTITIONS: "0"`, "KAFKA__PARTITIONS"},
		{"latest", "redis:7.4.1", "redis:latest", `tag "latest" is not a full version`},
		{"bare major", "apache/kafka:3.9.1", "apache/kafka:3", `tag "3" is not a full version`},
		{"no tag", "haproxy:3.0.5", "haproxy", "has no tag"},
		{"state off volumes", "volumes: [redis:/data]", "", "keeps state in /data"},
		{"two brokers", "kafka-1:9092,kafka-2:9092,kafka-3:9092", "kafka-1:9092,kafka-2:9092", "lists 2 brokers"},
		{"replica published", "    hostname: cfgd-1\n", "    hostname: cfgd-1\n    ports: [\"8081:8080\"]\n", "want one published port"},
		{"keys off volumes", "    - keys:/var/lib/cfgd/keys\n", "", "AUTH__KEYS_DIR must be set to a named volume"},
		{"replica before migrate", "  migrate: {condition: service_completed_successfully}\n", "", "must start after migrate"},
		{"missing config file", "./compose/haproxy/haproxy.cfg", "./compose/haproxy/haproxy.conf", "does not exist"},
		{"unparsable", "services:\n", "services:\n  - [\n", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(doc, []byte(tc.old)) {
				t.Fatalf("the compose file no longer contains %q: update the test", tc.old)
			}
			broken := bytes.Replace(doc, []byte(tc.old), []byte(tc.new), 1)
			problems := checkCompose(broken, dockerfile, filepath.Dir(composePath))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("want a problem containing %q, got:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}

	t.Run("dockerfile base not pinned", func(t *testing.T) {
		broken := regexp.MustCompile(`(?m)^FROM debian:\S+`).ReplaceAll(dockerfile, []byte("FROM debian:bookworm-slim"))
		problems := checkCompose(doc, broken, filepath.Dir(composePath))
		if !slices.ContainsFunc(problems, func(p string) bool {
			return strings.Contains(p, "Dockerfile: image debian:bookworm-slim is not pinned")
		}) {
			t.Fatalf("unpinned Dockerfile base not caught:\n%s", strings.Join(problems, "\n"))
		}
	})
}

func TestPinned(t *testing.T) {
	for _, tc := range []struct {
		ref string
		ok  bool
	}{
		{"redis:7.4.1", true},
		{"clickhouse/clickhouse-server:24.8.4.13", true},
		{"postgres:16.10", true},
		{"debian:12.12-slim", true},
		{"golang:1.26.8-bookworm", true},
		{"redis:7.4.1@sha256:0123abcd", true},
		{"redis", false},
		{"redis:latest", false},
		{"redis:7", false},
		{"redis:7-alpine", false},
		{"golang:1.26-bookworm", false},
		{"redis:7.4", false},
		{"postgres:16", false},
		{"debian:12-slim", false},
		{"debian:bookworm-slim", false},
		{"registry.example:5000/redis", false},
		{"redis@md5:abc", false},
	} {
		err := pinned(tc.ref)
		if (err == nil) != tc.ok {
			t.Errorf("pinned(%q) = %v, want ok=%v", tc.ref, err, tc.ok)
		}
	}
}
