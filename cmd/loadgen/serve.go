package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/ClickHouse/clickhouse-go/v2"

	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/cmd/internal/rig"
	"github.com/cfgd/cfgd/cmd/internal/servestack"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// The serve bench (-serve): a real `cfgd serve` (embedded broker, default
// settings) fed unpaced through one ingest path at a time, each path in
// each round on a serve of its own with databases of its own (Postgres,
// ClickHouse, Redis and the broker's log on the local stack), so neither
// its memory nor a backlog another path left behind counts for it;
// alternating round by round with the direct-insert baseline.
//
// A path's figure is that of the loadgen pipeline bench: the clients
// send -events events as fast as they are answered, and the rate is those
// events over the time from the first call until the last of them is
// queryable, against the direct insert of the same number of events.
// Unpaced, every path acknowledges events faster than the sink makes them
// queryable (they wait in Kafka meanwhile): the acknowledged rate is
// printed beside.

// servePaths are the ingest edges the bench drives, in the order of a
// round.
var servePaths = []string{"rest", "grpc", "otlp-http", "otlp-grpc"}

// goalServeRSS is issue 31's bound on serve's resident memory at its max
// ingest rate, in MB (10^6 bytes; the figures are printed in MiB).
const goalServeRSS = 300

// sender sends one pre-built body (the b-th) of a path as client c and
// says how many events cfgd accepted.
type sender func(ctx context.Context, c, b int) (int, error)

// serveRun is what one path measured in one round.
type serveRun struct {
	acked, errs  int64
	rate         float64 // events/s, first call to the last event queryable
	callRate     float64 // events/s acknowledged while the clients sent
	peakRSS, hwm float64 // MiB: the largest VmRSS sample, VmHWM at the end
	cores        float64 // serve's CPU seconds per second of the run
	firstErr     string
}

type serveBench struct {
	o      options
	st     *servestack.Stack
	keys   []string
	http   *http.Client
	conns  []*grpc.ClientConn
	ingest []ingestv1.IngestServiceClient
	otlp   []coltracepb.TraceServiceClient
}

func benchServe(ctx context.Context, o options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	paths := servePaths
	if o.servePaths != "" {
		paths = strings.Split(o.servePaths, ",")
		for _, p := range paths {
			if !slices.Contains(servePaths, p) {
				return fmt.Errorf("-serve-paths: %q is none of %s", p, strings.Join(servePaths, ","))
			}
		}
	}
	before, err := parseSettings(o.serveBefore)
	if err != nil {
		return err
	}
	type variant struct {
		label    string
		settings map[string]string
	}
	variants := []variant{{"", nil}}
	if before != nil {
		// Each path's before and after alternate within every round.
		variants = []variant{{" before", before}, {"", nil}}
		fmt.Printf("serve bench: each path also with %s (\"before\"), alternating\n", o.serveBefore)
	}
	_, chunk := eventPool()
	fmt.Printf("serve bench: %d events a path and round, unpaced, %d clients of %d events a call, %d rounds; baseline the direct insert of as many\n",
		o.events, o.clients, o.callEvents, o.rounds)
	var baselines []float64
	runs := map[string][]serveRun{}
	for round := 1; round <= o.rounds; round++ {
		base, err := directInsert(ctx, o, o.events, chunk)
		if err != nil {
			return err
		}
		baselines = append(baselines, base)
		fmt.Printf("round %d: baseline direct insert %10.0f events/s\n", round, base)
		for _, path := range paths {
			for _, v := range variants {
				p := path + v.label
				r, err := measureServe(ctx, o, path, round, v.settings)
				if err != nil {
					return fmt.Errorf("%s, round %d: %w", p, round, err)
				}
				runs[p] = append(runs[p], r)
				fmt.Printf("round %d: %-16s %10.0f events/s queryable (%.2f of the baseline), %10.0f acknowledged/s, %d calls failed, peak RSS %.0f MiB (VmHWM %.0f), serve used %.2f cores\n",
					round, p, r.rate, r.rate/base, r.callRate, r.errs, r.peakRSS, r.hwm, r.cores)
				if r.firstErr != "" {
					fmt.Printf("          first failure: %s\n", r.firstErr)
				}
			}
		}
	}
	cores := float64(runtime.NumCPU())
	fmt.Println()
	fmt.Printf("== cfgd serve ingest, unpaced, medians of %d rounds (baseline median %.0f events/s, %d CPUs) ==\n", o.rounds, median(baselines), runtime.NumCPU())
	fmt.Printf("%-16s %10s %7s %14s %10s %16s %10s   %s\n", "path", "events/s", "ratio", "acknowledged/s", "per core", "per serve core", "peak RSS", "goal")
	var labels []string
	for _, path := range paths {
		for _, v := range variants {
			labels = append(labels, path+v.label)
		}
	}
	for _, p := range labels {
		var rates, ratios, acks, perServeCore []float64
		peak := 0.0
		for i, r := range runs[p] {
			rates = append(rates, r.rate)
			ratios = append(ratios, r.rate/baselines[i])
			acks = append(acks, r.callRate)
			perServeCore = append(perServeCore, r.rate/r.cores)
			peak = max(peak, r.peakRSS, r.hwm)
		}
		fmt.Printf("%-16s %10.0f %7.2f %14.0f %10.0f %16.0f %6.0f MiB   %s\n", p, median(rates), median(ratios), median(acks), median(rates)/cores, median(perServeCore), peak,
			goal(true, peak*(1<<20) < goalServeRSS*1e6, fmt.Sprintf("RSS < %d MB", goalServeRSS)))
	}
	fmt.Println("(events/s: from the first call until the last event is queryable; ratio: the median of each round's over that round's baseline; per core: over the machine's CPUs, which serve shared with ClickHouse, Postgres and the clients; per serve core: over the CPU serve itself used; peak RSS: the largest VmRSS or VmHWM of every round's serve)")
	return nil
}

// parseSettings reads "K=V,K=V" (nil for "").
func parseSettings(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-serve-before: %q is not NAME=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// measureServe starts a serve of its own for path p in round round,
// measures it and tears it down.
func measureServe(ctx context.Context, o options, p string, round int, settings map[string]string) (serveRun, error) {
	stamp := fmt.Sprintf("%s_%s_r%d", time.Now().UTC().Format("20060102_150405"), strings.ReplaceAll(p, "-", ""), round)
	dir, err := os.MkdirTemp("", "cfgd-bench-serve-")
	if err != nil {
		return serveRun{}, err
	}
	if o.keep {
		fmt.Println("serve bench: keeping", dir, "(serve.log, the broker's log)")
	} else {
		defer os.RemoveAll(dir)
	}
	chOpts, err := clickhouse.ParseDSN(o.clickhouse)
	if err != nil {
		return serveRun{}, err
	}
	st, err := servestack.New(ctx, servestack.Options{Cfgd: o.cfgd, Postgres: o.postgres, ClickHouse: chOpts.Addr[0], Redis: o.redis,
		Name: "benchserve", Hold: time.Hour, Settings: settings}, dir, stamp)
	if err != nil {
		return serveRun{}, err
	}
	defer st.Close(o.keep)
	if err := st.Start(ctx); err != nil {
		return serveRun{}, err
	}
	b := &serveBench{o: o, st: st, http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}}}
	defer b.close()
	if err := b.setUp(ctx); err != nil {
		return serveRun{}, err
	}
	return b.measure(ctx, p, round)
}

func (b *serveBench) close() {
	for _, c := range b.conns {
		_ = c.Close()
	}
}

// setUp makes a staff user and an API key per client (so no caller nears
// a per-caller bound) and the clients' gRPC connections.
func (b *serveBench) setUp(ctx context.Context) error {
	const staff = "staff@bench.example.com"
	if _, err := b.st.CLI(ctx, b.st.CLIEnv, "user", "create-superuser", "--email", staff); err != nil {
		return err
	}
	for i := range b.o.clients {
		out, err := b.st.CLI(ctx, b.st.CLIEnv, "apikey", "create", "--name", fmt.Sprintf("bench-%d", i), "--type", "service", "--user", staff)
		if err != nil {
			return err
		}
		key, _, err := rig.ParseAPIKey(out)
		if err != nil {
			return err
		}
		b.keys = append(b.keys, key)
		conn, err := grpc.NewClient(b.st.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		b.conns = append(b.conns, conn)
		b.ingest = append(b.ingest, ingestv1.NewIngestServiceClient(conn))
		b.otlp = append(b.otlp, coltracepb.NewTraceServiceClient(conn))
	}
	return nil
}

// bodiesPerClient pre-built bodies each client cycles through, so the
// clients spend their CPU on sending, not on building.
const bodiesPerClient = 4

// sender builds the bodies of path p (each event of service service) and
// returns what sends one.
func (b *serveBench) sender(p, service string) (sender, error) {
	n := b.o.clients * bodiesPerClient
	ids := func(k int) []string {
		out := make([]string, b.o.callEvents)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d-%d", service, k, i)
		}
		return out
	}
	switch p {
	case "rest":
		bodies := make([][]byte, n)
		for k := range bodies {
			evs := make([]rig.LogEvent, b.o.callEvents)
			for i, id := range ids(k) {
				evs[i] = rig.LogEvent{RequestID: id, ServiceName: service, MethodName: methods[i%len(methods)], Status: "success", DurationMS: int64(i % 300)}
			}
			var err error
			if bodies[k], err = json.Marshal(evs); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context, c, k int) (int, error) {
			var out struct {
				Accepted int `json:"accepted"`
			}
			data, err := b.post(ctx, "/api/grpc/monitor/ingest/", "application/json", b.keys[c], bodies[(c*bodiesPerClient+k)%n], http.StatusAccepted)
			if err != nil {
				return 0, err
			}
			return out.Accepted, json.Unmarshal(data, &out)
		}, nil
	case "grpc":
		bodies := make([][]*ingestv1.Event, n)
		for k := range bodies {
			bodies[k] = make([]*ingestv1.Event, b.o.callEvents)
			for i, id := range ids(k) {
				bodies[k][i] = &ingestv1.Event{RequestId: id, ServiceName: service, MethodName: methods[i%len(methods)], Status: "success", DurationMs: int64(i % 300)}
			}
		}
		return func(ctx context.Context, c, k int) (int, error) {
			n, err := rig.Report(ctx, b.ingest[c], b.keys[c], "", bodies[(c*bodiesPerClient+k)%n])
			return int(n), err
		}, nil
	case "otlp-http":
		bodies := make([][]byte, n)
		for k := range bodies {
			var err error
			if bodies[k], err = proto.Marshal(rig.OTLPTraces("bench", service, "Export", ids(k), time.Now())); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context, c, k int) (int, error) {
			data, err := b.post(ctx, "/v1/traces", "application/x-protobuf", b.keys[c], bodies[(c*bodiesPerClient+k)%n], http.StatusOK)
			if err != nil {
				return 0, err
			}
			var res coltracepb.ExportTraceServiceResponse
			if err := proto.Unmarshal(data, &res); err != nil {
				return 0, err
			}
			return b.o.callEvents - int(res.GetPartialSuccess().GetRejectedSpans()), nil
		}, nil
	case "otlp-grpc":
		bodies := make([]*coltracepb.ExportTraceServiceRequest, n)
		for k := range bodies {
			bodies[k] = rig.OTLPTraces("bench", service, "Export", ids(k), time.Now())
		}
		return func(ctx context.Context, c, k int) (int, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			res, err := b.otlp[c].Export(metadata.AppendToOutgoingContext(ctx, "x-api-key", b.keys[c]), bodies[(c*bodiesPerClient+k)%n])
			if err != nil {
				return 0, err
			}
			return b.o.callEvents - int(res.GetPartialSuccess().GetRejectedSpans()), nil
		}, nil
	}
	return nil, fmt.Errorf("unknown path %q", p)
}

// post sends body to serve's path with key and returns the answer, an
// error unless its status is want.
func (b *serveBench) post(ctx context.Context, path, contentType, key string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.st.Base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-API-Key", key)
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s answered %d: %.200s", path, resp.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}

// measure warms path p until its first call is queryable, then has the
// clients send -events events as fast as they are answered and waits
// until all are queryable, sampling serve's memory all along.
func (b *serveBench) measure(ctx context.Context, p string, round int) (serveRun, error) {
	service := fmt.Sprintf("bench.%s.r%d", strings.ReplaceAll(p, "-", ""), round)
	send, err := b.sender(p, service)
	if err != nil {
		return serveRun{}, err
	}
	// Warm-up outside the clock: the keys reach serve's key store, the
	// sink's consumer group joins (the broker delays a first join by
	// seconds), connections open.
	deadline := time.Now().Add(2 * time.Minute)
	var warm int
	for {
		warm, err = send(ctx, 0, 0)
		if err == nil && warm > 0 {
			break
		}
		if time.Now().After(deadline) {
			return serveRun{}, fmt.Errorf("warm-up call not accepted within 2 minutes: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := b.waitQueryable(ctx, service, int64(warm), 2*time.Minute); err != nil {
		return serveRun{}, fmt.Errorf("warm-up: %w", err)
	}

	pid := b.st.Serve.Pid()
	var run serveRun
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			run.peakRSS = max(run.peakRSS, servestack.ProcStatus(pid, "VmRSS")/1024)
			select {
			case <-sctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	cpu0 := procCPU(pid)
	start := time.Now()
	var acked, errs atomic.Int64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for c := range b.o.clients {
		wg.Go(func() {
			for k := 0; acked.Load() < int64(b.o.events) && ctx.Err() == nil; k++ {
				n, err := send(ctx, c, k)
				acked.Add(int64(n))
				if err != nil {
					errs.Add(1)
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
					// A refusal (Kafka full: 503) is answered at once;
					// don't spin on it.
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	sent := time.Since(start)
	run.acked, run.errs = acked.Load(), errs.Load()
	if p := firstErr.Load(); p != nil {
		run.firstErr = *p
	}
	err = b.waitQueryable(ctx, service, int64(warm)+run.acked, 10*time.Minute)
	took := time.Since(start)
	cpu := procCPU(pid) - cpu0
	stopSampling()
	<-sampled
	run.hwm = servestack.ProcStatus(pid, "VmHWM") / 1024
	if err != nil {
		return run, err
	}
	run.rate = float64(run.acked) / took.Seconds()
	run.callRate = float64(run.acked) / sent.Seconds()
	run.cores = cpu / took.Seconds()
	return run, nil
}

func (b *serveBench) count(ctx context.Context, service string) (int64, error) {
	var n uint64
	err := b.st.CH.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s WHERE service_name = ?", b.st.CHDB, requestlogview.RawTable), service).Scan(&n)
	return int64(n), err
}

// waitQueryable waits until the raw table holds want rows of service.
func (b *serveBench) waitQueryable(ctx context.Context, service string, want int64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got, err := b.count(ctx, service)
		if err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events of %s queryable after %v", got, want, service, within)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// procCPU is the user and system CPU seconds of process pid so far
// (/proc/<pid>/stat, fields 14 and 15, in clock ticks of 1/100 s, which
// is what Linux reports on every architecture Go runs on), NaN when it
// cannot be read.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return math.NaN()
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start past its closing parenthesis.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return math.NaN()
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
