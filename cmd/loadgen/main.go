// Command loadgen is `make bench-ingest`: it measures the request-log path
// on this machine and prints each figure next to its same-run baseline.
//
//  1. Ingest: N synthetic events through the real path (the request-log
//     producer -> Kafka -> the ClickHouse sink -> the raw table and its
//     rollups), against clickhouse-go batch inserts of the same rows
//     straight into the same schema.
//  2. Queries: overview/services/methods over HTTP at 24 h and 720 h with
//     Q rows spread over 30 days, against the same questions as raw SQL
//     over the raw table; with -query-ingest-rate while the ingest path
//     runs beside them at that rate (stream.go).
//
// Everything runs on loopback; each phase uses its own scratch ClickHouse
// database, dropped at the end.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

type options struct {
	events      int
	queryRows   int
	iterations  int
	partitions  int
	producers   int
	callEvents  int
	clickhouse  string
	brokers     string
	skipIngest  bool
	skipQueries bool
	keep        bool
	rate        int
	replay      bool
	rounds      int
	postgres    string
	replayBatch int
	inserters   int
	cpuProfile  string
	unsigned    bool
	queryDB     string
	batchGap    time.Duration
	rateOf      float64
	// The ingest stream beside the query benchmark.
	queryIngestRate int
	queryIngestOf   float64
	skipRawSQL      bool
	// The serve bench.
	serve       bool
	servePaths  string
	serveBefore string
	clients     int
	cfgd        string
	redis       string
	// The replay bench on a cluster.
	cluster string
}

func main() {
	var o options
	flag.IntVar(&o.events, "events", 2_000_000, "events pushed through the ingest path")
	flag.IntVar(&o.queryRows, "query-rows", 10_000_000, "rows loaded (over 30 days) for the query benchmark")
	flag.IntVar(&o.iterations, "iterations", 50, "timed runs of each query")
	flag.IntVar(&o.partitions, "partitions", 4, "partitions of the request-log topic")
	flag.IntVar(&o.producers, "producers", 8, "concurrent producing callers")
	flag.IntVar(&o.callEvents, "call-events", 1000, "events per produce call (an ingest request)")
	flag.StringVar(&o.clickhouse, "clickhouse", "clickhouse://127.0.0.1:9000/default", "ClickHouse server (scratch databases are created on it)")
	flag.StringVar(&o.brokers, "brokers", "", "Kafka brokers; empty starts an in-process embedded broker")
	flag.BoolVar(&o.skipIngest, "skip-ingest", false, "skip the ingest benchmark")
	flag.BoolVar(&o.skipQueries, "skip-queries", false, "skip the query benchmark")
	flag.IntVar(&o.rate, "rate", 0, "events/s the callers produce in all (0: as fast as they can); below the sink's capacity it measures delay, not backlog")
	flag.Float64Var(&o.rateOf, "rate-of-baseline", 0, "pace at this fraction of the direct-insert baseline measured in the same run (overrides -rate; 0.42 is about half the unpaced end-to-end maximum, which is 0.85-0.9 of the baseline), so that a paced run means the same on a busy machine")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch databases (to look at them afterwards)")
	flag.BoolVar(&o.replay, "replay", false, "run the replay benchmark instead (-events into the topic, then raw consume against replay into ClickHouse)")
	flag.IntVar(&o.rounds, "rounds", 3, "alternating rounds of each side of the replay benchmark (medians reported)")
	flag.IntVar(&o.replayBatch, "replay-batch", 0, "rows per replay insert (0: the replay's default)")
	flag.IntVar(&o.inserters, "replay-inserters", 0, "concurrent replay inserts (0: the replay's default)")
	flag.BoolVar(&o.unsigned, "unsigned", false, "produce unsigned records and verify none (before request-log records were signed), to measure what signing costs")
	flag.StringVar(&o.queryDB, "query-db", "", "database of the query benchmark, kept afterwards and loaded only when empty (so two builds can be timed in turn on the same rows); empty: a scratch database")
	flag.DurationVar(&o.batchGap, "batch-gap", 0, "the sink's REQUESTLOG__BATCH_GAP (0: its default)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the replay rounds (or of the end-to-end ingest) to this file")
	flag.StringVar(&o.postgres, "postgres", "postgres:///postgres?host=/var/run/postgresql&user=postgres", "Postgres server of the replay bench's scratch database (migrated, dropped afterwards)")
	flag.IntVar(&o.queryIngestRate, "query-ingest-rate", 0, "events/s ingested through the real path (producer -> Kafka -> sink) into a scratch database on the same server while the statistics are timed, stamped with the time they are produced (0: none)")
	flag.Float64Var(&o.queryIngestOf, "query-ingest-of-baseline", 0, "the same at this fraction of a direct-insert baseline of 1M rows measured first (overrides -query-ingest-rate; 0.42 is about half the unpaced end-to-end maximum)")
	flag.BoolVar(&o.skipRawSQL, "skip-raw-sql", false, "time the statistics over HTTP only, not the same questions as raw SQL (which take seconds at 720 h, and with -query-ingest-rate keep the stream running into the table meanwhile)")
	flag.BoolVar(&o.serve, "serve", false, "run the serve bench instead: a cfgd serve (-cfgd) on databases of its own, fed -events events unpaced through each ingest path in turn (REST JSON, gRPC, OTLP/HTTP protobuf, OTLP/gRPC; a serve of its own each) by -clients callers of -call-events events, its RSS sampled, against the direct insert of as many, -rounds alternating rounds")
	flag.StringVar(&o.servePaths, "serve-paths", "", "the serve bench's paths, comma-separated (rest,grpc,otlp-http,otlp-grpc; empty: all)")
	flag.StringVar(&o.serveBefore, "serve-before", "", "settings of a \"before\" serve (NAME=value,NAME=value; say SERVE__MEMORY_LIMIT_MB=0) the serve bench also measures on every path, alternating with the default one in each round")
	flag.IntVar(&o.clients, "clients", 8, "the serve bench's concurrent callers (each with an API key of its own)")
	flag.StringVar(&o.cfgd, "cfgd", "bin/cfgd", "the cfgd binary the serve bench runs")
	flag.StringVar(&o.cluster, "cluster", "", "the replay bench on this ClickHouse cluster (CLICKHOUSE__CLUSTER) of the server -clickhouse names: its scratch database on every server, the ceiling into a Distributed table over replicated ones (make test-cluster's cluster: -cluster cfgd -clickhouse clickhouse://127.0.0.1:9101/default)")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "the local stack's Redis (the serve bench claims a database on it)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	fmt.Printf("cfgd request-log benchmark: %d CPUs, GOMAXPROCS %d, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), time.Now().UTC().Format(time.RFC3339))
	if o.replay {
		return benchReplay(ctx, o)
	}
	if o.serve {
		return benchServe(ctx, o)
	}
	if !o.skipIngest {
		if err := benchIngest(ctx, o); err != nil {
			return err
		}
	}
	if !o.skipQueries {
		if err := benchQueries(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

var (
	services = func() []string {
		out := make([]string, 20)
		for i := range out {
			out[i] = fmt.Sprintf("bench.svc%02d.v1.Service%02d", i, i)
		}
		return out
	}()
	methods  = []string{"Get", "List", "Create", "Update", "Delete"}
	statuses = []string{"success", "success", "success", "success", "success", "success", "success", "success", "error", "timeout"}
)

// synth returns n events spread over [from, from+span).
func synth(r *mrand.Rand, n int, from time.Time, span time.Duration) []requestlog.Event {
	out := make([]requestlog.Event, n)
	for i := range out {
		st := statuses[r.IntN(len(statuses))]
		code := map[string]string{"success": "OK", "error": "Internal", "timeout": "DeadlineExceeded"}[st]
		at := from
		if span > 0 {
			at = from.Add(time.Duration(r.Int64N(int64(span))))
		}
		out[i] = requestlog.Event{RequestID: fmt.Sprintf("%016x", r.Uint64()), ServiceName: services[r.IntN(len(services))],
			MethodName: methods[r.IntN(len(methods))], Status: st, GRPCStatusCode: code, DurationMS: int64(r.ExpFloat64() * 20),
			CreatedAt: at.UTC(), ClientIP: "127.0.0.1", UserID: int64(r.IntN(1000)), Username: "bench", IsAuthenticated: true,
			APIKeyID: 1, APIKeyName: "bench"}
	}
	return out
}

// scratch creates a database and returns a connection to it and a drop func.
func scratch(ctx context.Context, o options, prefix string) (driver.Conn, func(), error) {
	return open(ctx, o, prefix, "")
}

// open connects to the database name, created when missing and kept
// afterwards; empty name: a scratch database named prefix + random,
// dropped by the returned func (unless -keep).
func open(ctx context.Context, o options, prefix, name string) (driver.Conn, func(), error) {
	dsn := o.clickhouse
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		return nil, nil, err
	}
	keep := o.keep || name != ""
	create := "CREATE DATABASE IF NOT EXISTS " + name
	if name == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		name = prefix + hex.EncodeToString(b)
		create = "CREATE DATABASE " + name
	}
	if err := admin.Exec(ctx, create); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("clickhouse at %s: %w", dsn, err)
	}
	o2, _ := clickhouse.ParseDSN(dsn)
	o2.Auth.Database = name
	o2.MaxOpenConns = 8
	conn, err := clickhouse.Open(o2)
	if err != nil {
		return nil, nil, err
	}
	drop := func() {
		_ = conn.Close()
		if keep {
			fmt.Println("kept database", name)
		} else {
			_ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
		}
		_ = admin.Close()
	}
	if err := requestlogview.CreateTables(ctx, conn, requestlogview.LiveTables()); err != nil {
		drop()
		return nil, nil, err
	}
	return conn, drop, nil
}

// eventPool is a pool of synthetic events, cycled by chunk (n events
// from the i-th on), which keeps the generator's own memory out of the
// figures.
func eventPool() (pool []requestlog.Event, chunk func(i, n int) []requestlog.Event) {
	r := mrand.New(mrand.NewPCG(1, 2))
	pool = synth(r, 100_000, time.Now().UTC(), 0)
	return pool, func(i, n int) []requestlog.Event {
		i %= len(pool)
		if i+n > len(pool) {
			i = 0
		}
		return pool[i : i+n]
	}
}

// directInsert is the baseline of the ingest benches: n events of chunk
// in columnar batches of 50,000 straight into the same schema
// (materialized views included) of a scratch database, in events/s.
func directInsert(ctx context.Context, o options, n int, chunk func(i, n int) []requestlog.Event) (float64, error) {
	base, dropBase, err := scratch(ctx, o, "cfgd_bench_raw_")
	if err != nil {
		return 0, err
	}
	defer dropBase()
	return directInsertRate(ctx, base, n, chunk)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func count(ctx context.Context, conn driver.Conn) (uint64, error) {
	var n uint64
	err := conn.QueryRow(ctx, "SELECT count() FROM "+requestlogview.RawTable).Scan(&n)
	return n, err
}

func benchIngest(ctx context.Context, o options) error {
	pool, chunk := eventPool()
	baseline, err := directInsert(ctx, o, o.events, chunk)
	if err != nil {
		return err
	}
	if o.rateOf > 0 {
		o.rate = int(o.rateOf * baseline)
	}

	// The real path.
	conn, drop, err := scratch(ctx, o, "cfgd_bench_e2e_")
	if err != nil {
		return err
	}
	defer drop()
	path, err := startIngestPath(ctx, o, conn)
	if err != nil {
		return err
	}
	defer path.close()
	prod, s := path.prod, path.sink
	// Warm the producer (topic creation, connections) and the sink (its
	// consumer group's first join, which the broker delays by seconds)
	// outside the clock: the delays measure the running path, not its
	// start.
	if err := prod.Produce(ctx, pool[:1]); err != nil {
		return err
	}
	for {
		n, err := count(ctx, conn)
		if err != nil {
			return err
		}
		if n > 0 {
			break
		}
		if !process.Sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	want := uint64(o.events) + 1

	type ack struct {
		cum int64
		at  time.Time
	}
	var (
		acks    []ack
		acksMu  sync.Mutex
		cum     atomic.Int64
		next    atomic.Int64
		wg      sync.WaitGroup
		prodErr atomic.Pointer[error]
	)
	cum.Store(1)
	next.Store(1)
	var peakRSS atomic.Int64
	if o.cpuProfile != "" {
		// The end-to-end phase only: producer, broker and sink share the
		// process, ClickHouse is another.
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(int64(o.callEvents)) - int64(o.callEvents)
				if i >= int64(o.events)+1 {
					return
				}
				if o.rate > 0 {
					// Paced: event i is due i/rate seconds after the start.
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / float64(o.rate) * float64(time.Second)))))
				}
				chunk := chunk(int(i), int(min(int64(o.callEvents), int64(o.events)+1-i)))
				if err := prod.Produce(ctx, chunk); err != nil {
					prodErr.Store(&err)
					return
				}
				c := cum.Add(int64(len(chunk)))
				acksMu.Lock()
				acks = append(acks, ack{c, time.Now()})
				acksMu.Unlock()
			}
		}()
	}
	// Poll ClickHouse for what is queryable.
	type seen struct {
		n  uint64
		at time.Time
	}
	var polls []seen
	producedAt := time.Time{}
	for {
		n, err := count(ctx, conn)
		if err != nil {
			return err
		}
		polls = append(polls, seen{n, time.Now()})
		peakRSS.Store(max(peakRSS.Load(), rss()))
		if p := prodErr.Load(); p != nil {
			return fmt.Errorf("produce: %w", *p)
		}
		if producedAt.IsZero() && cum.Load() >= int64(want) {
			producedAt = time.Now()
		}
		if n >= want {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("only %d of %d events queryable after 10 minutes", n, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
	elapsed := time.Since(start)
	wg.Wait()
	e2e := float64(want-1) / elapsed.Seconds()
	produceRate := float64(want-1) / producedAt.Sub(start).Seconds()
	// Delay: from an event's acknowledgement by Kafka to the first poll
	// that counts at least as many rows (rows arrive across partitions in
	// no strict order, so this is by count, within the 25ms poll).
	var delays []float64
	for _, a := range acks {
		k, _ := slices.BinarySearchFunc(polls, uint64(a.cum), func(p seen, t uint64) int {
			switch {
			case p.n < t:
				return -1
			case p.n > t:
				return 1
			}
			return 0
		})
		for k < len(polls) && polls[k].at.Before(a.at) {
			k++
		}
		if k < len(polls) {
			delays = append(delays, polls[k].at.Sub(a.at).Seconds()*1000)
		}
	}
	st := s.Stats()
	fmt.Println()
	fmt.Println("== ingest: producer -> Kafka (embedded) -> sink -> ClickHouse ==")
	pace := "unpaced"
	if o.rate > 0 {
		pace = fmt.Sprintf("paced at %d events/s", o.rate)
	}
	signed := "signed"
	if o.unsigned {
		signed = "unsigned"
	}
	fmt.Printf("events                         %d (%d per produce call, %d callers, %d partitions, %s, %s)\n", want, o.callEvents, o.producers, o.partitions, pace, signed)
	fmt.Printf("baseline direct insert         %10.0f events/s (clickhouse-go columnar batches of 50,000)\n", baseline)
	ratio := e2e / baseline * 100
	fmt.Printf("end to end (queryable)         %10.0f events/s = %.0f%% of baseline (elapsed %.2fs)   %s\n", e2e, ratio, elapsed.Seconds(),
		goal(o.rate == 0, ratio >= goalIngestRatio, fmt.Sprintf("unpaced >= %.0f%%", goalIngestRatio)))
	fmt.Printf("produce (acknowledged)         %10.0f events/s\n", produceRate)
	p99 := pct(delays, 99)
	fmt.Printf("produce-to-queryable delay     p50 %.0f ms  p99 %.0f ms  max %.0f ms (%d samples)   %s\n", pct(delays, 50), p99, pct(delays, 100), len(delays),
		goal(o.rate > 0, p99 < goalDelayP99, fmt.Sprintf("p99 < %.0f ms at half the max rate", goalDelayP99)))
	fmt.Printf("sink                           inserted %d, skipped %d, dead-lettered %d\n", st.Inserted, st.Skipped, st.Poisoned)
	if err := printParts(ctx, conn, elapsed, path.batch); err != nil {
		return err
	}
	fmt.Printf("loadgen process peak RSS       %d MB (broker + producer + sink in one process)\n", peakRSS.Load()>>20)
	return nil
}

// printParts prints the parts each table of conn's database was given by
// inserts during the run (level 0, merged away or not: ClickHouse keeps an
// inactive part for old_parts_lifetime, 8 minutes by default), per second
// of the run, against the sink's bound of one insert per batch gap.
func printParts(ctx context.Context, conn driver.Conn, elapsed, gap time.Duration) error {
	rows, err := conn.Query(ctx, `SELECT table, countIf(level = 0), countIf(active) FROM system.parts
WHERE database = currentDatabase() GROUP BY table ORDER BY table`)
	if err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	defer rows.Close()
	fmt.Printf("parts inserted per table        ")
	for rows.Next() {
		var table string
		var inserted, active uint64
		if err := rows.Scan(&table, &inserted, &active); err != nil {
			return fmt.Errorf("parts: %w", err)
		}
		fmt.Printf("%s %d (%.1f/s, %d active)  ", strings.TrimPrefix(table, "requestlog_"), inserted, float64(inserted)/elapsed.Seconds(), active)
	}
	fmt.Printf("bound 1/gap = %.0f/s\n", time.Second.Seconds()/gap.Seconds())
	return rows.Err()
}

func benchQueries(ctx context.Context, o options) error {
	ingestRate, err := queryIngestRate(ctx, o)
	if err != nil {
		return err
	}
	conn, drop, err := open(ctx, o, "cfgd_bench_q_", o.queryDB)
	if err != nil {
		return err
	}
	defer drop()
	now := time.Now().UTC()
	from := now.Add(-30 * 24 * time.Hour)
	load := time.Now()
	r := mrand.New(mrand.NewPCG(3, 4))
	loaded, err := count(ctx, conn)
	if err != nil {
		return err
	}
	rowsN := o.queryRows
	if loaded > 0 {
		// A kept database: its rows were spread over the 30 days before
		// its load, which the windows below still mostly cover.
		rowsN, o.queryRows = int(loaded), 0
		fmt.Printf("reusing database %s\n", o.queryDB)
	}
	for i := 0; i < o.queryRows; i += 200_000 {
		n := min(200_000, o.queryRows-i)
		var rows sinks.RequestLogRows
		for j, e := range synth(r, n, from, 30*24*time.Hour) {
			rows.Add(0, int64(i+j), 0, &e)
		}
		if err := rows.Insert(ctx, conn); err != nil {
			return err
		}
	}
	loadSecs := time.Since(load).Seconds()
	// Let the background merges of the load settle, as on a server that
	// has been up a while.
	rollups := requestlogview.LiveTables().Rollups()
	for _, t := range rollups[:len(rollups)-1] { // the day rollup's few rows are left as inserted
		_ = conn.Exec(ctx, "OPTIMIZE TABLE "+t+" FINAL")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	router := mux.NewRouter()
	pass := func(h http.Handler) http.Handler { return h }
	monitor.New(nil, requestlogview.New(conn, time.Now, nil), time.Now).Mount(router, pass, pass)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 30 * time.Second}
	if ingestRate > 0 {
		// The real path, on the same machine and ClickHouse server, into a
		// scratch database of its own: the sink skips offsets the tables
		// hold, and the loaded rows (and a kept database's earlier
		// streams) hold the embedded broker's. So the queried tables get
		// no new parts, and stay the same between runs. Ten seconds to
		// settle (merges) before the clock.
		sconn, dropStream, err := scratch(ctx, o, "cfgd_bench_stream_")
		if err != nil {
			return err
		}
		defer dropStream()
		path, err := startIngestPath(ctx, o, sconn)
		if err != nil {
			return err
		}
		defer path.close()
		stream := startIngestStream(ctx, path, ingestRate, o.callEvents, 4)
		defer func() {
			rate, err := stream.stop()
			st := path.sink.Stats()
			fmt.Printf("ingest beside the queries: produced %.0f events/s (asked %d), sink inserted %d\n", rate, ingestRate, st.Inserted)
			if err != nil {
				fmt.Println(err)
			}
		}()
		if !process.Sleep(ctx, 10*time.Second) {
			return ctx.Err()
		}
	}

	fmt.Println()
	fmt.Printf("== queries: %d rows over 30 days (loaded in %.1fs), %d runs each ==\n", rowsN, loadSecs, o.iterations)
	fmt.Printf("%-22s %12s %12s   %14s %14s   %s   %s\n", "question", "HTTP p50", "HTTP p99", "raw SQL p50", "raw SQL p99", "sql/http p50", "goal")
	for _, hours := range []int{24, 720} {
		since := now.Add(-time.Duration(hours) * time.Hour)
		raw := map[string]string{
			"overview": `SELECT count(), countIf(status = 'success'), countIf(status IN ('error', 'timeout', 'cancelled')), sum(duration_ms), uniqExact(service_name)
FROM requestlog_raw WHERE created_at >= toDateTime(?)`,
			"services": `SELECT service_name, count() AS total, countIf(status = 'success'), countIf(status IN ('error', 'timeout', 'cancelled')), sum(duration_ms), uniqExact(method_name), quantileTDigest(0.95)(duration_ms)
FROM requestlog_raw WHERE created_at >= toDateTime(?) GROUP BY service_name ORDER BY total DESC`,
			"methods": `SELECT service_name, method_name, count() AS total, countIf(status = 'success'), countIf(status IN ('error', 'timeout', 'cancelled')), sum(duration_ms), min(duration_ms), max(duration_ms), quantileTDigest(0.95)(duration_ms)
FROM requestlog_raw WHERE created_at >= toDateTime(?) GROUP BY service_name, method_name ORDER BY total DESC`,
		}
		for _, q := range []string{"overview", "services", "methods"} {
			url := fmt.Sprintf("%s/api/grpc/monitor/%s/?hours=%d", base, q, hours)
			httpT, err := timeIt(o.iterations, func() error {
				res, err := client.Get(url)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					return fmt.Errorf("%s: %d", url, res.StatusCode)
				}
				return nil
			})
			if err != nil {
				return err
			}
			var sqlT []float64
			if !o.skipRawSQL {
				sqlT, err = timeIt(o.iterations, func() error {
					rows, err := conn.Query(ctx, raw[q], since.Unix())
					if err != nil {
						return err
					}
					for rows.Next() {
					}
					rows.Close()
					return rows.Err()
				})
				if err != nil {
					return err
				}
			}
			sql := fmt.Sprintf("%11.1f ms %11.1f ms   %5.1fx", pct(sqlT, 50), pct(sqlT, 99), pct(sqlT, 50)/pct(httpT, 50))
			if o.skipRawSQL {
				sql = fmt.Sprintf("%14s %14s   %6s", "-", "-", "-")
			}
			fmt.Printf("%-22s %9.1f ms %9.1f ms   %s   %s\n", fmt.Sprintf("%s %dh", q, hours), pct(httpT, 50), pct(httpT, 99), sql,
				goal(true, pct(httpT, 50) <= goalStatsP50 && pct(httpT, 99) <= goalStatsP99, fmt.Sprintf("p50 <= %.0f, p99 <= %.0f ms", goalStatsP50, goalStatsP99)))
		}
	}
	return nil
}

func timeIt(n int, fn func() error) ([]float64, error) {
	if err := fn(); err != nil { // warm-up
		return nil, err
	}
	out := make([]float64, 0, n)
	for range n {
		t := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		out = append(out, float64(time.Since(t).Microseconds())/1000)
	}
	return out, nil
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// rss is this process's resident set in bytes (Linux), 0 elsewhere.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * int64(os.Getpagesize())
}

// benchBus is the broker of a run: -brokers when given, otherwise an
// embedded one in memory, closed by the returned function.
func benchBus(o options) (kafka.Config, func(), error) {
	bc := kafka.Config{Partitions: o.partitions, TopicPrefix: "bench.", ClientID: "cfgd-loadgen"}
	if o.brokers != "" {
		bc.Brokers = []string{o.brokers}
		return bc, func() {}, nil
	}
	emb, err := kafka.StartEmbedded("", "127.0.0.1:0")
	if err != nil {
		return bc, nil, err
	}
	bc.Brokers, bc.SASL = []string{emb.Addr()}, emb.SASL()
	return bc, emb.Close, nil
}

// The goals of docs/benchmarks.md, printed beside the figures they judge,
// so a reader sees at once which are met.
const (
	goalIngestRatio = 95.0 // % of the direct insert, unpaced, signed
	goalDelayP99    = 500.0
	goalStatsP50    = 20.0
	goalStatsP99    = 50.0
	goalReplayRatio = 60.0 // % of the insert ceiling
)

// goal says whether a figure meets its goal, or that the run does not
// measure it (applies false: a paced run says nothing of the unpaced
// ratio, an unpaced one nothing of the delay at half the rate).
func goal(applies, met bool, what string) string {
	switch {
	case !applies:
		return "goal " + what + ": not this run"
	case met:
		return "goal " + what + ": met"
	default:
		return "goal " + what + ": MISSED"
	}
}
