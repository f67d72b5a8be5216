// Command soak is `make soak`: one `cfgd serve` (with its embedded Kafka
// broker) and one `cfgd worker` on the local stack, fed for SOAK_DURATION
// at half the ingest rate this machine sustains, plus a background of OTP
// sign-ins, API-key use and tasks. Every 10 s it samples what a slow leak
// shows in (memory, goroutines, descriptors, ClickHouse parts, Postgres
// table sizes, the Kafka log, the two latencies), writes samples.csv and
// a chart per series under ./data/soak/<timestamp>/, and fails when a
// series keeps growing over the second half beyond its tolerance, or when
// the request-log retention or the idempotency sweep did not happen on
// time (docs/testing.md, "Soak").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cfgd/cfgd/cmd/internal/servestack"
)

type options struct {
	cfgd       string
	duration   time.Duration
	out        string
	sample     time.Duration
	burst      time.Duration
	rate       float64
	keep       bool
	pgAdmin    string
	clickhouse string
	redis      string
}

func main() {
	var o options
	flag.StringVar(&o.cfgd, "cfgd", "bin/cfgd", "the cfgd binary to run")
	flag.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the load runs (SOAK_DURATION)")
	flag.StringVar(&o.out, "out", "data/soak", "where the run's directory is made")
	flag.DurationVar(&o.sample, "sample", 10*time.Second, "time between samples")
	flag.DurationVar(&o.burst, "burst", 20*time.Second, "length of the unpaced burst that measures the sustained ingest rate")
	flag.Float64Var(&o.rate, "rate", 0, "ingest rate in events/s; 0: half the rate the burst measures")
	flag.BoolVar(&o.keep, "keep", false, "keep the run's Postgres and ClickHouse databases")
	flag.StringVar(&o.pgAdmin, "postgres", "postgres:///postgres?host=/var/run/postgresql&user=postgres", "the local stack's Postgres (a database is created on it)")
	flag.StringVar(&o.clickhouse, "clickhouse", "127.0.0.1:9000", "the local stack's ClickHouse (native protocol)")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "the local stack's Redis")
	flag.Parse()
	if o.duration < 2*time.Minute {
		fmt.Fprintln(os.Stderr, "soak: -duration must be at least 2m (the checks read its second half)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, o)
	var failed checkFailures
	switch {
	case errors.As(err, &failed):
		fmt.Printf("soak: %d check(s) failed\n", len(failed))
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// checkFailures are the checks a finished run failed, one line each.
type checkFailures []string

func (c checkFailures) Error() string { return fmt.Sprintf("%d checks failed", len(c)) }

func run(ctx context.Context, o options) error {
	stamp := time.Now().UTC().Format("20060102-150405")
	dir, err := filepath.Abs(filepath.Join(o.out, stamp))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Printf("soak: run directory %s\n", dir)
	st, err := servestack.New(ctx, servestack.Options{Cfgd: o.cfgd, Postgres: o.pgAdmin, ClickHouse: o.clickhouse, Redis: o.redis,
		Name: "soak", Hold: o.duration, Worker: true, Settings: map[string]string{
			"CLICKHOUSE__RETENTION_DAYS":  fmt.Sprint(retentionDays),
			"REQUESTLOG__RETENTION_EVERY": retentionEvery.String(),
			"TASKS__RETENTION":            "1m",
		}}, dir, stamp)
	if err != nil {
		return err
	}
	defer st.Close(o.keep)
	if err := st.Start(ctx); err != nil {
		return err
	}
	l, err := newLoad(ctx, st)
	if err != nil {
		return err
	}
	rate := o.rate
	if rate <= 0 {
		sustained, err := l.measure(ctx, o.burst)
		if err != nil {
			return fmt.Errorf("measuring the ingest rate: %w", err)
		}
		rate = sustained / 2
		fmt.Printf("soak: sustained ingest %.0f events/s (unpaced REST burst of %v, until queryable); running at %.0f events/s\n", sustained, o.burst, rate)
	}
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	start := time.Now()
	wait := l.run(runCtx, rate)
	sw := newSweeps(st)
	sweepDone := sw.run(runCtx)
	s := newSampler(st, l, dir)
	samples, err := s.run(runCtx, o.sample, start)
	wait()
	sweepDone()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := writeCharts(dir, samples); err != nil {
		return err
	}
	fmt.Printf("soak: %d samples in %s/samples.csv, charts beside it\n", len(samples.rows), dir)
	fails := samples.check(o.duration)
	fails = append(fails, sw.check()...)
	fails = append(fails, l.check()...)
	if err := writeSummary(dir, rate, samples, sw, l, fails); err != nil {
		return err
	}
	if len(fails) > 0 {
		return checkFailures(fails)
	}
	return nil
}
