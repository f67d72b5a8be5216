package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/servestack"
)

var nan = math.NaN()

// series is one column of samples.csv, with the check its second half
// must pass.
type series struct {
	name, unit string
	// tolerance is the growth allowed over the second half (least-squares
	// slope over the second half × its length): the larger of abs and
	// rel × the second half's median; a negative abs means not checked
	// (shown only).
	abs, rel float64
	why      string
}

// The series and their tolerances (docs/testing.md, "Soak"). Tables that
// grow with the load by design within the run (the event store, which is
// the outbox and is never pruned; idempotency keys, kept 24 h; session
// revocations, kept while their session could live; the embedded broker's
// log, which has no retention) are checked per row or per event: what
// must stay flat is the cost of one, not the total.
var allSeries = []series{
	{name: "serve_rss_mb", unit: "MiB", abs: 80, rel: 0.2, why: "serve's resident memory"},
	{name: "serve_goroutines", unit: "", abs: 25, rel: 0.10, why: "serve's goroutines (go_goroutines of /metrics)"},
	{name: "serve_fds", unit: "", abs: 16, rel: 0.10, why: "serve's open file descriptors (/proc/<pid>/fd)"},
	{name: "worker_rss_mb", unit: "MiB", abs: 24, rel: 0.15, why: "the worker's resident memory"},
	{name: "worker_threads", unit: "", abs: 4, rel: 0.10, why: "the worker's OS threads (it serves no /metrics, so no goroutine count)"},
	{name: "worker_fds", unit: "", abs: 8, rel: 0.10, why: "the worker's open file descriptors"},
	{name: "ch_parts_raw", unit: "", abs: 30, rel: 0.5, why: "active parts of requestlog_raw"},
	{name: "ch_parts_minute", unit: "", abs: 30, rel: 0.5, why: "active parts of requestlog_minute"},
	{name: "ch_parts_hour", unit: "", abs: 30, rel: 0.5, why: "active parts of requestlog_hour"},
	{name: "ch_parts_day", unit: "", abs: 30, rel: 0.5, why: "active parts of requestlog_day"},
	{name: "pg_idempotency_mb", unit: "MiB", abs: -1, why: "requestlog_idempotency, table and indexes (grows: keys live 24 h)"},
	{name: "pg_idempotency_bytes_per_row", unit: "B", abs: 64, rel: 0.15, why: "requestlog_idempotency bytes per row"},
	{name: "pg_events_mb", unit: "MiB", abs: -1, why: "events (the event store and outbox), table and indexes (append-only)"},
	{name: "pg_events_bytes_per_row", unit: "B", abs: 64, rel: 0.15, why: "events bytes per row"},
	{name: "pg_revocations_mb", unit: "MiB", abs: -1, why: "session_revocations, table and indexes (grows: one row per logout, kept until its session ends, JWT__REFRESH_TTL)"},
	{name: "pg_revocations_bytes_per_row", unit: "B", abs: -1, why: "session_revocations bytes per row"},
	{name: "dead_letters", unit: "", abs: 0, rel: 0, why: "records dead-lettered (cfgd_projection_deadletters_total + cfgd_sink_deadletters_total)"},
	{name: "kafka_log_mb", unit: "MiB", abs: -1, why: "the embedded broker's data directory (no retention)"},
	{name: "kafka_bytes_per_event", unit: "B", abs: 16, rel: 0.15, why: "broker log bytes per request-log event acknowledged"},
	{name: "ingest_p99_ms", unit: "ms", abs: 500, rel: 0.5, why: "p99 of probe events, post to queryable in the raw table, per 10 s"},
	{name: "stats_p99_ms", unit: "ms", abs: 100, rel: 0.5, why: "p99 of GET /api/grpc/monitor/overview/?hours=24 with a staff token, per 10 s"},
	{name: "acked_events", unit: "", abs: -1, why: "request-log events acknowledged so far"},
	{name: "redis_completed_tasks", unit: "", abs: 60, rel: 0.5, why: "completed tasks asynq keeps (TASKS__RETENTION=1m)"},
	{name: "redis_keys", unit: "", abs: -1, why: "keys in the run's Redis database (sign-in throttles live an hour)"},
	{name: "load_avg", unit: "", abs: -1, why: "the machine's 1-minute load average (/proc/loadavg): other work sharing the cores"},
}

type samples struct {
	t    []float64 // seconds since the load started
	rows [][]float64
}

type sampler struct {
	st  *servestack.Stack
	l   *load
	dir string
}

func newSampler(st *servestack.Stack, l *load, dir string) *sampler {
	return &sampler{st: st, l: l, dir: dir}
}

// run samples every interval until ctx ends, appending each row to
// samples.csv as it goes (a run cut short keeps what it saw).
func (s *sampler) run(ctx context.Context, interval time.Duration, start time.Time) (*samples, error) {
	f, err := os.Create(filepath.Join(s.dir, "samples.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"t_s"}
	for _, se := range allSeries {
		head = append(head, se.name)
	}
	_ = w.Write(head)
	w.Flush()
	out := &samples{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, nil
		case <-t.C:
		}
		if !s.st.Serve.Running() || !s.st.Worker.Running() {
			return out, fmt.Errorf("a cfgd process exited during the run (serve running %v, worker running %v): see %s and %s",
				s.st.Serve.Running(), s.st.Worker.Running(), s.st.Serve.Log, s.st.Worker.Log)
		}
		row := s.sample(ctx)
		if ctx.Err() != nil {
			return out, nil
		}
		el := time.Since(start).Seconds()
		out.t = append(out.t, el)
		out.rows = append(out.rows, row)
		rec := []string{strconv.FormatFloat(el, 'f', 0, 64)}
		for _, v := range row {
			rec = append(rec, strconv.FormatFloat(v, 'f', 2, 64))
		}
		_ = w.Write(rec)
		w.Flush()
		fmt.Printf("soak: t=%4.0fs rss serve %.0f MiB worker %.0f MiB, goroutines %.0f, fds %.0f/%.0f, parts raw %.0f, idem %.1f MiB, events %.1f MiB, kafka %.1f MiB, ingest p99 %.0f ms, stats p99 %.0f ms, acked %.0f\n",
			el, row[0], row[3], row[1], row[2], row[5], row[6], row[10], row[12], row[17], row[19], row[20], row[21])
	}
}

func (s *sampler) sample(ctx context.Context) []float64 {
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	serve, worker := s.st.Serve.Pid(), s.st.Worker.Pid()
	metrics := s.metrics(ctx)
	parts := s.parts(ctx)
	idem, idemRows := s.table(ctx, "requestlog_idempotency")
	evs, evRows := s.table(ctx, "events")
	rev, revRows := s.table(ctx, "session_revocations")
	kafkaBytes := dirBytes(filepath.Join(s.dir, "kafka"))
	acked := float64(s.l.acked.Load())
	probe, stats := s.l.window()
	return []float64{
		servestack.ProcStatus(serve, "VmRSS") / 1024, metrics["go_goroutines"], fds(serve),
		servestack.ProcStatus(worker, "VmRSS") / 1024, servestack.ProcStatus(worker, "Threads"), fds(worker),
		parts["requestlog_raw"], parts["requestlog_minute"], parts["requestlog_hour"], parts["requestlog_day"],
		idem / (1 << 20), per(idem, idemRows),
		evs / (1 << 20), per(evs, evRows),
		rev / (1 << 20), per(rev, revRows),
		metrics["cfgd_projection_deadletters_total"] + metrics["cfgd_sink_deadletters_total"],
		kafkaBytes / (1 << 20), per(kafkaBytes, acked),
		probe, stats, acked,
		s.redisCount(ctx, func(ctx context.Context) (int64, error) {
			return s.st.Rdb.ZCard(ctx, "asynq:{default}:completed").Result()
		}),
		s.redisCount(ctx, func(ctx context.Context) (int64, error) { return s.st.Rdb.DBSize(ctx).Result() }),
		loadAvg(),
	}
}

func (s *sampler) redisCount(ctx context.Context, f func(context.Context) (int64, error)) float64 {
	n, err := f(ctx)
	if err != nil {
		return nan
	}
	return float64(n)
}

func per(a, b float64) float64 {
	if b == 0 {
		return nan
	}
	return a / b
}

// metrics sums serve's /metrics samples by metric name.
func (s *sampler) metrics(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.st.Base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			rest = line[strings.LastIndexByte(line, '}')+1:]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out
}

func (s *sampler) parts(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	rows, err := s.st.CH.Query(ctx, "SELECT table, count() FROM system.parts WHERE active AND database = ? GROUP BY table", s.st.CHDB)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var n uint64
		if rows.Scan(&t, &n) == nil {
			out[t] = float64(n)
		}
	}
	return out
}

// table is a Postgres table's size with its indexes and TOAST, and its
// rows.
func (s *sampler) table(ctx context.Context, name string) (bytes, rows float64) {
	var b, n int64
	if err := s.st.PG.QueryRow(ctx, fmt.Sprintf("SELECT pg_total_relation_size('%s'), (SELECT count(*) FROM %[1]s)", name)).Scan(&b, &n); err != nil {
		return nan, nan
	}
	return float64(b), float64(n)
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nan
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return nan
	}
	return f
}

func fds(pid int) float64 {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nan
	}
	return float64(len(es))
}

func dirBytes(dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return float64(n)
}

// trend is the growth of a series over the second half of the run: the
// least-squares slope over its samples times the half's length, and the
// half's median.
func (s *samples) trend(col int) (growth, median float64, n int) {
	xs, ys := s.secondHalf(col)
	if len(xs) < 3 {
		return nan, nan, len(xs)
	}
	slope, _, _ := leastSquares(xs, ys)
	sorted := slices.Clone(ys)
	slices.Sort(sorted)
	return slope * (xs[len(xs)-1] - xs[0]), sorted[len(sorted)/2], len(xs)
}

// secondHalf is the samples of col over the second half of the run (the
// times and the values), those it could not read left out.
func (s *samples) secondHalf(col int) (xs, ys []float64) {
	if len(s.t) == 0 {
		return nil, nil
	}
	mid := s.t[len(s.t)-1] / 2
	for i, t := range s.t {
		if v := s.rows[i][col]; t >= mid && !math.IsNaN(v) {
			xs, ys = append(xs, t), append(ys, v)
		}
	}
	return xs, ys
}

// leastSquares is the least-squares line through the points (xs, ys):
// its slope, through the means mx and my.
func leastSquares(xs, ys []float64) (slope, mx, my float64) {
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return sxy / sxx, mx, my
}

func (se series) tolerance(median float64) float64 {
	return math.Max(se.abs, se.rel*median)
}

// check is one line per series that grew beyond its tolerance over the
// second half.
func (s *samples) check(time.Duration) []string {
	var out []string
	for i, se := range allSeries {
		if se.abs < 0 {
			continue
		}
		growth, median, n := s.trend(i)
		if n < 3 {
			out = append(out, fmt.Sprintf("%s: only %d samples in the second half (the run was too short, or the series was not readable)", se.name, n))
			continue
		}
		if tol := se.tolerance(median); growth > tol {
			out = append(out, fmt.Sprintf("%s: grew %.1f%s over the second half (least-squares slope × its length; median %.1f), tolerance %.1f", se.name, growth, se.unit, median, tol))
		}
	}
	return out
}
