package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// The files whose metric names must exist in a fresh cfgd's /metrics.
const (
	operationsDoc = "../../docs/operations.md"
	dashboardFile = "../../deploy/monitoring/grafana-dashboard.json"
	alertsFile    = "../../deploy/monitoring/alerts.yml"
)

// A fresh `cfgd serve`, scraped right after it came up (one /healthz
// first, as any orchestrator would send), exports every metric the
// operations page lists and every metric the shipped dashboard and alert
// rules query: a dashboard panel or an alert over a name cfgd does not
// export (misspelt, renamed, or only created by the first event) would
// silently show nothing and never fire.
func TestEveryDocumentedAndMonitoredMetricIsExportedFromStart(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	r := start(t)
	if code, _ := get(t, r.base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	code, body := get(t, r.base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	exported := scrapedNames(body)

	documented := documentedMetrics(t)
	if len(documented) < 20 {
		t.Fatalf("the metrics table of %s lists %d metrics; is it still a table of backticked names?", operationsDoc, len(documented))
	}
	for _, m := range documented {
		if !exported[m] {
			t.Errorf("%s lists %s, which a fresh cfgd does not export", operationsDoc, m)
		}
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%s holds %d expressions", dashboardFile, len(exprs))
	}
	alerts := alertExprs(t)
	if len(alerts) < 5 {
		t.Fatalf("%s holds %d rules", alertsFile, len(alerts))
	}
	for _, src := range []struct {
		file  string
		exprs []string
	}{{dashboardFile, exprs}, {alertsFile, alerts}} {
		for _, e := range src.exprs {
			if missing := unknownMetrics(e, exported); len(missing) > 0 {
				t.Errorf("%s: %q queries %v, which a fresh cfgd does not export", src.file, e, missing)
			}
			if len(metricNames(e)) == 0 {
				t.Errorf("%s: %q names no metric", src.file, e)
			}
		}
	}
}

// The extractor finds every metric name of an expression and nothing
// else, so a misspelt name is reported and a label, function or keyword
// never is.
func TestMetricNamesOfPromQL(t *testing.T) {
	exported := map[string]bool{"cfgd_ready": true, "cfgd_sink_insert_seconds_bucket": true, "up": true,
		"cfgd_relay_lag_events": true, "cfgd_sink_deadletters_total": true, "cfgd_ingest_rejected_events_total": true}
	for _, c := range []struct {
		expr    string
		names   []string
		missing []string
	}{
		{`min by (dependency) (cfgd_ready) == 0`, []string{"cfgd_ready"}, nil},
		{`histogram_quantile(0.95, sum by (le, sink) (rate(cfgd_sink_insert_seconds_bucket{sink=~"requestlog.*"}[5m])))`,
			[]string{"cfgd_sink_insert_seconds_bucket"}, nil},
		{`max(cfgd_relay_lag_events) > 1000 and on() up{job="cfgd"} == 1`, []string{"cfgd_relay_lag_events", "up"}, nil},
		{`increase(cfgd_sink_deadletters_total[15m]) > 0`, []string{"cfgd_sink_deadletters_total"}, nil},
		{`sum without (reason) (rate(cfgd_ingest_rejected_events_total{reason!="invalid", transport='rest'}[$__rate_interval]))`,
			[]string{"cfgd_ingest_rejected_events_total"}, nil},
		{`sum(rate(cfgd_ingest_rejectd_events_total[5m])) / ignoring(transport) group_left sum(cfgd_ready offset 5m)`,
			[]string{"cfgd_ingest_rejectd_events_total", "cfgd_ready"}, []string{"cfgd_ingest_rejectd_events_total"}},
		{`cfgd_redy == bool 0 unless cfgd_ready`, []string{"cfgd_redy", "cfgd_ready"}, []string{"cfgd_redy"}},
		{`{__name__="cfgd_ready"}`, nil, nil},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.names) {
			t.Errorf("metricNames(%q) = %v, want %v", c.expr, got, c.names)
		}
		if got := unknownMetrics(c.expr, exported); !slices.Equal(got, c.missing) {
			t.Errorf("unknownMetrics(%q) = %v, want %v", c.expr, got, c.missing)
		}
	}
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVariable = regexp.MustCompile(`\$\{?\w+\}?`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "offset": true, "bool": true, "inf": true, "nan": true,
		"atan2": true, "e": true}
)

// metricNames lists the metric names an expression selects, in order:
// the identifiers left once strings, label matchers, ranges, groupings,
// dashboard variables, function calls, keywords and numbers are removed.
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promVariable.ReplaceAllString(s, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promLabels.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(s, -1) {
		name := strings.TrimSpace(s[m[0]:m[1]])
		if m[2] >= 0 || promKeywords[strings.ToLower(name)] {
			continue // a function call or a keyword
		}
		if m[0] > 0 && (s[m[0]-1] >= '0' && s[m[0]-1] <= '9' || s[m[0]-1] == '.') {
			continue // a unit or exponent of a number (5m, 1e3)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// unknownMetrics lists the names expr selects that exported lacks.
func unknownMetrics(expr string, exported map[string]bool) []string {
	var out []string
	for _, n := range metricNames(expr) {
		if !exported[n] {
			out = append(out, n)
		}
	}
	return out
}

// scrapedNames are the series names of a text exposition, with each
// histogram's and summary's family name besides its _bucket, _sum and
// _count series.
func scrapedNames(body string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" {
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out[strings.Fields(f)[0]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		out[name] = true
	}
	return out
}

// documentedMetrics are the backticked names in the first column of the
// metrics table in the operations page.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Health, metrics, shutdown\n")
	if !ok {
		t.Fatalf("%s has no section Health, metrics, shutdown", operationsDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\|")
	var out []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// dashboardExprs are the query expressions of every panel (and nested
// row) of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// alertExprs are the expressions of every rule of the Prometheus rule
// file.
func alertExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s: group %s has a rule without alert or expr", alertsFile, g.Name)
			}
			out = append(out, r.Expr)
		}
	}
	return out
}

// The ingest counts what it accepts and rejects by reason, and the sinks
// count their writes (rows, latency) once the events reached them.
func TestServeCountsIngestAndSinkWrites(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	// A database of its own: the sink skips offsets ClickHouse already
	// holds, which another test's fresh broker would have written.
	opts, _ := testenv.ClickHouse(t)
	t.Setenv("CLICKHOUSE__URL", "clickhouse://"+opts.Addr[0]+"/"+opts.Auth.Database)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"user", "create-superuser", "--email", "metrics@example.com"}, &out, &errOut); err != nil {
		t.Fatalf("create-superuser: %v %s", err, errOut.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"apikey", "create", "--name", "svc", "--type", "service", "--user", "metrics@example.com"}, &out, &errOut); err != nil {
		t.Fatalf("apikey create: %v %s", err, errOut.String())
	}
	key := regexp.MustCompile(`(?m)^cfgd_[A-Za-z0-9_-]{43}$`).FindString(out.String())
	id := regexp.MustCompile(`id=(\d+)`).FindStringSubmatch(out.String())[1]
	r := start(t)
	ingest := func(body string) int {
		req, _ := http.NewRequest(http.MethodPost, r.base+"/api/grpc/monitor/ingest/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	valid := `{"service_name":"s","method_name":"m","status":"success","api_key_id":` + id + `}`
	// The key works once serve has projected it.
	code := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && code != http.StatusAccepted; time.Sleep(100 * time.Millisecond) {
		code = ingest("[" + valid + "," + valid + "]")
	}
	if code != http.StatusAccepted {
		t.Fatalf("ingest answered %d", code)
	}
	if code := ingest(`[` + valid + `,{"method_name":"m","status":"success"}]`); code != http.StatusAccepted {
		t.Fatalf("one invalid event of two: %d, want 202 (partly stored)", code)
	}
	if code := ingest(`{"not":"an array"}`); code != http.StatusBadRequest {
		t.Fatalf("not an array: %d, want 400", code)
	}
	// cfgd.ingest.v1: one valid event, one without a service.
	addrRe := regexp.MustCompile(`"msg":"grpc server listening","addr":"([^"]+)"`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := addrRe.FindStringSubmatch(r.stderr.String()); m != nil {
			addr = m[1]
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), 10*time.Second)
	defer cancel()
	stream, err := ingestv1.NewIngestServiceClient(conn).Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&ingestv1.ReportRequest{Events: []*ingestv1.Event{
		{ServiceName: "s", MethodName: "m", Status: "success"}, {MethodName: "m", Status: "success"},
	}}); err != nil {
		t.Fatal(err)
	}
	if res, err := stream.CloseAndRecv(); err != nil || res.GetAccepted() != 1 || res.GetRejected() != 1 {
		t.Fatalf("Report: %v %v, want 1 accepted, 1 rejected", res, err)
	}
	// OTLP over HTTP: a body that is no ExportTraceServiceRequest.
	req, _ := http.NewRequest(http.MethodPost, r.base+"/v1/traces", strings.NewReader("not protobuf"))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-API-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("OTLP garbage: %d, want 400", res.StatusCode)
	}

	want := map[string]float64{
		`cfgd_ingest_accepted_events_total{transport="rest"}`:                      3,
		`cfgd_ingest_rejected_events_total{reason="invalid",transport="rest"}`:     1,
		`cfgd_ingest_rejected_events_total{reason="malformed",transport="rest"}`:   1,
		`cfgd_ingest_rejected_events_total{reason="unavailable",transport="rest"}`: 0,
		`cfgd_ingest_accepted_events_total{transport="grpc"}`:                      1,
		`cfgd_ingest_rejected_events_total{reason="invalid",transport="grpc"}`:     1,
		`cfgd_ingest_rejected_events_total{reason="malformed",transport="otlp"}`:   1,
		`cfgd_ingest_accepted_events_total{transport="otlp"}`:                      0,
		`cfgd_sink_batch_rows_sum{sink="requestlog-clickhouse"}`:                   4,
		`cfgd_sink_insert_errors_total{sink="requestlog-clickhouse"}`:              0,
	}
	var got map[string]float64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, body := get(t, r.base+"/metrics")
		got = scrapedValues(body)
		if got[`cfgd_sink_batch_rows_sum{sink="requestlog-clickhouse"}`] >= 4 && got[`cfgd_sink_batch_rows_sum{sink="apikey-usage"}`] >= 1 {
			break
		}
	}
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	// The usage sink writes one row per key per recorder flush (once a
	// second), however many requests it counts.
	if got[`cfgd_sink_batch_rows_sum{sink="apikey-usage"}`] < 1 {
		t.Errorf("the usage sink's writes were not counted")
	}
	if got[`cfgd_sink_insert_seconds_count{sink="requestlog-clickhouse"}`] < 1 {
		t.Errorf("the request-log sink's inserts were not timed")
	}
}

// scrapedValues maps each series line of a text exposition to its value.
func scrapedValues(body string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
