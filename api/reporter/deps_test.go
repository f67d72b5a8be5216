package reporter_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The reporter is what other Go servers import, so it brings gRPC and
// protobuf (and what they need) and nothing of cfgd's server side: no
// Kafka client (sarama, franz-go), no Watermill.
func TestReporterDependsOnlyOnGRPCAndProtobuf(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	// grpc's own dependencies: genproto's rpc status, x/net (http2), x/sys
	// and x/text (idna).
	modules := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto/googleapis/rpc",
		"golang.org/x/net", "golang.org/x/sys", "golang.org/x/text"}
	// cfgd's own packages it needs (their dependencies are listed and
	// checked here too): the event type and its codec, the error codes,
	// the character-boundary cut of client strings (standard library only).
	cfgd := []string{"github.com/cfgd/cfgd/api/reporter", "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1", "github.com/cfgd/cfgd/events/requestlog",
		"github.com/cfgd/cfgd/deploy/errcode", "github.com/cfgd/cfgd/deploy/clip"}
	var extra []string
	for _, pkg := range strings.Fields(string(out)) {
		if slices.Contains(cfgd, pkg) || slices.ContainsFunc(modules, func(m string) bool { return pkg == m || strings.HasPrefix(pkg, m+"/") }) {
			continue
		}
		extra = append(extra, pkg)
	}
	if len(extra) > 0 {
		t.Fatalf("api/reporter depends on more than gRPC and protobuf:\n%s", strings.Join(extra, "\n"))
	}
}
