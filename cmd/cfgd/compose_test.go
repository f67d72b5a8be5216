package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
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

// deployDir holds the compose file, the Dockerfile and the files the
// compose file mounts (paths in it are relative to it).
const deployDir = "../../deploy"

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

// checkCompose returns every problem of a compose file, of the Dockerfile
// its cfgd services are built from and of the configuration files it
// mounts; none means it is fit to start. read returns a file by its path
// relative to the compose file's directory.
func checkCompose(doc []byte, read func(rel string) ([]byte, error)) []string {
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
	mounted := map[string][]byte{}    // bind-mounted file -> content
	listens := map[string][2]string{} // serve replica -> HTTP and gRPC port
	scrape := map[string]string{}     // serve replica -> the port of its untokened /metrics
	images := map[string][]string{}   // repository -> services
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
				b, err := read(src)
				if err != nil {
					problem("service %s mounts %s, which does not exist", name, src)
					continue
				}
				mounted[src] = b
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
					_, httpPort, _ := strings.Cut(env["HTTP__ADDR"], ":")
					_, grpcPort, _ := strings.Cut(env["GRPC__ADDR"], ":")
					listens[name] = [2]string{httpPort, grpcPort}
					// docs/operations.md: /metrics behind the published
					// port needs METRICS__ADDR or METRICS__TOKEN.
					if env["METRICS__TOKEN"] == "" {
						_, metricsPort, _ := strings.Cut(env["METRICS__ADDR"], ":")
						if metricsPort == "" || metricsPort == httpPort {
							problem("service %s serves /metrics on its HTTP port without METRICS__TOKEN, and the proxy publishes that port: set METRICS__ADDR to a port of its own (docs/operations.md)", name)
						} else {
							scrape[name] = metricsPort
						}
					}
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

	out = append(out, checkMounted(mounted, names, images["clickhouse/clickhouse-server"], listens, scrape)...)

	dockerfile, err := read("Dockerfile")
	if err != nil {
		problem("Dockerfile: %v", err)
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

// clickHouseConfig is the part of a ClickHouse or Keeper configuration file
// the checks read: the cluster's replicas, the keeper nodes the servers use
// and the keepers' raft members.
type clickHouseConfig struct {
	RemoteServers struct {
		Clusters []struct {
			Shards []struct {
				Replicas []struct {
					Host string `xml:"host"`
				} `xml:"replica"`
			} `xml:"shard"`
		} `xml:",any"`
	} `xml:"remote_servers"`
	Zookeeper struct {
		Nodes []struct {
			Host string `xml:"host"`
		} `xml:"node"`
	} `xml:"zookeeper"`
	Keeper struct {
		Raft struct {
			Servers []struct {
				ID   string `xml:"id"`
				Host string `xml:"hostname"`
			} `xml:"server"`
		} `xml:"raft_configuration"`
	} `xml:"keeper_server"`
}

// checkMounted checks the mounted configuration files against the compose
// file: every XML file parses, the cluster's replicas are the ClickHouse
// services, every keeper node is a service, all raft member lists are the
// same, and the proxy sends HTTP and gRPC to every replica on the ports it
// listens on, and nothing to a replica's untokened metrics port (scrape).
// Otherwise a replica added to the compose file alone would get no
// traffic, a keeper renamed in one file would split the quorum, or
// /metrics would be public.
func checkMounted(files map[string][]byte, services, clickhouse []string, listens map[string][2]string, scrape map[string]string) []string {
	var out []string
	problem := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)

	var replicas, raft []string
	raftFile := ""
	for _, p := range paths {
		switch {
		case strings.HasSuffix(p, ".xml"):
			var c clickHouseConfig
			if err := xml.Unmarshal(files[p], &c); err != nil {
				problem("%s does not parse: %v", p, err)
				continue
			}
			for _, cl := range c.RemoteServers.Clusters {
				for _, sh := range cl.Shards {
					for _, r := range sh.Replicas {
						replicas = append(replicas, r.Host)
					}
				}
			}
			for _, n := range c.Zookeeper.Nodes {
				if !slices.Contains(services, n.Host) {
					problem("%s: keeper node %s is not a service", p, n.Host)
				}
			}
			if len(c.Keeper.Raft.Servers) > 0 {
				var members []string
				for _, m := range c.Keeper.Raft.Servers {
					members = append(members, m.ID+"@"+m.Host)
					if !slices.Contains(services, m.Host) {
						problem("%s: raft member %s is not a service", p, m.Host)
					}
				}
				if raft == nil {
					raft, raftFile = members, p
				} else if !slices.Equal(raft, members) {
					problem("%s: raft members %v differ from %v in %s", p, members, raft, raftFile)
				}
			}
		case filepath.Base(p) == "haproxy.cfg":
			cfg := string(files[p])
			for name, ports := range listens {
				for _, port := range ports {
					if !strings.Contains(cfg, " "+name+":"+port+" ") {
						problem("%s sends nothing to %s:%s (replica %s)", p, name, port, name)
					}
				}
			}
			for name, port := range scrape {
				if strings.Contains(cfg, " "+name+":"+port+" ") {
					problem("%s publishes %s:%s, where /metrics answers without METRICS__TOKEN", p, name, port)
				}
			}
		}
	}
	slices.Sort(replicas)
	want := slices.Clone(clickhouse)
	slices.Sort(want)
	if !slices.Equal(replicas, want) {
		problem("the ClickHouse cluster's replicas are %v, the ClickHouse services %v", replicas, want)
	}
	if len(raft)%2 != 1 {
		problem("keeper has %d raft members: want an odd number, so that a quorum survives a lost node", len(raft))
	}
	return out
}

// deployFiles reads the files under deploy/ by their path relative to it,
// with the given replacements made in one of them (file, old, new).
func deployFiles(file, old, replacement string) func(rel string) ([]byte, error) {
	return func(rel string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(deployDir, rel))
		if err == nil && filepath.Clean(rel) == filepath.Clean(file) {
			b = bytes.Replace(b, []byte(old), []byte(replacement), 1)
		}
		return b, err
	}
}

// The compose file as committed has no problem; each broken variant of it,
// or of a file it mounts, is caught with a message that says what to fix.
func TestComposeFile(t *testing.T) {
	const composeFile = "docker-compose.yml"
	doc, err := os.ReadFile(filepath.Join(deployDir, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	if problems := checkCompose(doc, deployFiles("", "", "")); len(problems) > 0 {
		t.Fatalf("deploy/docker-compose.yml:\n%s", strings.Join(problems, "\n"))
	}

	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"misspelled setting", composeFile, "POSTGRES__URL:", "POSTGRES__ULR:", "POSTGRES__ULR is not a cfgd setting; did you mean POSTGRES__URL?"},
		{"unknown section", composeFile, "EMAIL__BACKEND: console", "EMAILS__BACKEND: console", "EMAILS__BACKEND is not a cfgd setting"},
		{"bad value", composeFile, `KAFKA__PARTITIONS: "12"`, `KAFKA__PARTITIONS: "0"`, "KAFKA__PARTITIONS"},
		{"latest", composeFile, "redis:7.4.1", "redis:latest", `tag "latest" is not a full version`},
		{"bare major", composeFile, "apache/kafka:3.9.1", "apache/kafka:3", `tag "3" is not a full version`},
		{"no tag", composeFile, "haproxy:3.0.5", "haproxy", "has no tag"},
		{"state off volumes", composeFile, "volumes: [redis:/data]", "", "keeps state in /data"},
		{"two brokers", composeFile, "kafka-1:9092,kafka-2:9092,kafka-3:9092", "kafka-1:9092,kafka-2:9092", "lists 2 brokers"},
		{"replica published", composeFile, "    hostname: cfgd-1\n", "    hostname: cfgd-1\n    ports: [\"8081:8080\"]\n", "want one published port"},
		{"keys off volumes", composeFile, "    - keys:/var/lib/cfgd/keys\n", "", "AUTH__KEYS_DIR must be set to a named volume"},
		{"replica before migrate", composeFile, "  migrate: {condition: service_completed_successfully}\n", "", "must start after migrate"},
		{"missing config file", composeFile, "./compose/haproxy/haproxy.cfg", "./compose/haproxy/haproxy.conf", "does not exist"},
		{"metrics on the published port", composeFile, "    METRICS__ADDR: 0.0.0.0:9090\n", "", "serves /metrics on its HTTP port without METRICS__TOKEN"},
		{"metrics port proxied", "compose/haproxy/haproxy.cfg", "server cfgd-2 cfgd-2:8080 check", "server cfgd-2 cfgd-2:9090 check", "publishes cfgd-2:9090, where /metrics answers"},
		{"unparsable", composeFile, "services:\n", "services:\n  - [\n", "does not parse"},
		{"replica the proxy misses", "compose/haproxy/haproxy.cfg", "server cfgd-2 cfgd-2:50051", "server cfgd-2 cfgd-3:50051", "sends nothing to cfgd-2:50051"},
		{"cluster replica renamed", "compose/clickhouse/cluster.xml", "<host>clickhouse-2</host>", "<host>clickhouse-3</host>", "the ClickHouse cluster's replicas are [clickhouse-1 clickhouse-3]"},
		{"raft lists differ", "compose/keeper/keeper.xml", "<id>3</id><hostname>clickhouse-keeper</hostname>", "<id>4</id><hostname>clickhouse-keeper</hostname>", "raft members"},
		{"keeper node unknown", "compose/clickhouse/cluster.xml", "<node><host>clickhouse-keeper</host>", "<node><host>keeper</host>", "keeper node keeper is not a service"},
		{"broken xml", "compose/clickhouse/keeper.xml", "</keeper_server>", "", "compose/clickhouse/keeper.xml does not parse"},
		{"dockerfile base not pinned", "Dockerfile", "FROM debian:12.12-slim", "FROM debian:bookworm-slim", "Dockerfile: image debian:bookworm-slim is not pinned"},
		{"dockerfile build base not pinned", "Dockerfile", "FROM golang:1.26.8-bookworm", "FROM golang:1.26-bookworm", `tag "1.26-bookworm" is not a full version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(deployDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.old)) {
				t.Fatalf("deploy/%s no longer contains %q: update the test", tc.file, tc.old)
			}
			broken, read := doc, deployFiles(tc.file, tc.old, tc.new)
			if tc.file == composeFile {
				broken = bytes.Replace(doc, []byte(tc.old), []byte(tc.new), 1)
			}
			problems := checkCompose(broken, read)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Fatalf("want a problem containing %q, got:\n%s", tc.want, strings.Join(problems, "\n"))
			}
		})
	}
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
