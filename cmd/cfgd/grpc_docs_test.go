package main

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/cfgd/cfgd/api/grpcserver"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	authv1 "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
)

// docs/api.md's list of cfgd's gRPC services names every service serve
// registers, and every method of each (it once left out MonitorService's
// queries, IngestService and OTLP).
func TestDocsListEveryGRPCService(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## gRPC\n")
	end := strings.Index(doc[start+1:], "\n### ")
	if start < 0 || end < 0 {
		t.Fatal("docs/api.md has no gRPC section followed by a sub-section")
	}
	section := strings.Join(strings.Fields(doc[start:start+1+end]), " ")
	services := map[string][]string{grpcserver.OTLPTraceService: {"Export"}}
	for _, d := range []grpc.ServiceDesc{apikeysv1.APIKeyService_ServiceDesc, monitorv1.MonitorService_ServiceDesc,
		ingestv1.IngestService_ServiceDesc, authv1.AuthService_ServiceDesc} {
		for _, m := range d.Methods {
			services[d.ServiceName] = append(services[d.ServiceName], m.MethodName)
		}
		for _, s := range d.Streams {
			services[d.ServiceName] = append(services[d.ServiceName], s.StreamName)
		}
	}
	for svc, methods := range services {
		i := strings.Index(section, "`"+svc+"` (")
		if i < 0 {
			t.Errorf("docs/api.md's gRPC section does not list `%s` (...)", svc)
			continue
		}
		list := section[i:]
		if j := strings.Index(list, ")"); j >= 0 {
			list = list[:j]
		}
		for _, m := range methods {
			if !strings.Contains(list, m) {
				t.Errorf("docs/api.md lists %s without %s: %q", svc, m, list)
			}
		}
	}
}
