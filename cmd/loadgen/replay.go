package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// benchReplay is `make bench-replay-clickhouse`: N events produced into
// the request-log topic of an embedded broker, then, in alternating
// rounds, the raw consume rate of that topic (every record read and
// decoded with the replay's reader, nothing stored) and the rate of `cfgd replay
// requestlog.clickhouse`'s code rebuilding the tables from it into a
// scratch ClickHouse database (shadow tables built, no swap).
func benchReplay(ctx context.Context, o options) error {
	bc, closeBus, err := benchBus(o)
	if err != nil {
		return err
	}
	defer closeBus()
	pool, dropPG, err := scratchPostgres(ctx, o.postgres)
	if err != nil {
		return err
	}
	defer dropPG()
	var (
		conn    driver.Conn
		drop    func()
		cluster requestlogview.Cluster
	)
	if o.cluster != "" {
		conn, cluster, drop, err = scratchCluster(ctx, o, "cfgd_bench_replay_")
	} else {
		conn, drop, err = scratch(ctx, o, "cfgd_bench_replay_")
	}
	if err != nil {
		return err
	}
	defer drop()

	// Produce: events in time order over the last three days (three day
	// partitions in ClickHouse), as a log kept for a while holds them; a
	// record's events are close in time, so a replay batch spans minutes,
	// not the whole range.
	r := mrand.New(mrand.NewPCG(5, 6))
	now := time.Now().UTC()
	from, step := now.Add(-72*time.Hour), 72*time.Hour/time.Duration(o.events)
	events := synth(r, 100_000, from, 0)
	pc := requestlogkafka.DefaultProducerConfig(bc)
	pc.Timeout = 30 * time.Second
	prod, err := requestlogkafka.NewProducer(pc, quiet())
	if err != nil {
		return err
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var prodErr atomic.Pointer[error]
	for range o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(int64(o.callEvents)) - int64(o.callEvents)
				if i >= int64(o.events) || prodErr.Load() != nil {
					return
				}
				k := int(i) % len(events)
				n := min(o.callEvents, o.events-int(i), len(events)-k)
				call := slices.Clone(events[k : k+n])
				for j := range call {
					call[j].CreatedAt = from.Add(time.Duration(int(i)+j) * step)
				}
				if err := prod.Produce(ctx, call); err != nil {
					prodErr.Store(&err)
					return
				}
				if n < o.callEvents && int(i)+n < o.events {
					// The pool wrapped: the rest of this call goes next time.
					next.Add(int64(n - o.callEvents))
				}
			}
		}()
	}
	wg.Wait()
	_ = prod.Close()
	if p := prodErr.Load(); p != nil {
		return fmt.Errorf("produce: %w", *p)
	}
	produced := time.Since(start)

	fmt.Println()
	fmt.Println("== replay: request-log topic -> ClickHouse shadow tables ==")
	fmt.Printf("events                         %d (%d per record, %d partitions, produced in %.1fs)\n", o.events, pc.PackEvents, o.partitions, produced.Seconds())
	if cluster.On() {
		fmt.Printf("clickhouse                     cluster %s, database %s\n", cluster.Name, cluster.Database)
	}
	var prof *os.File
	if o.cpuProfile != "" {
		if prof, err = os.Create(o.cpuProfile); err != nil {
			return err
		}
		defer prof.Close()
	}
	var raws, replays []float64
	for round := 1; round <= o.rounds; round++ {
		runtime.GC()
		t := time.Now()
		n, err := rawConsume(ctx, bc)
		if err != nil {
			return err
		}
		if n != int64(o.events) {
			return fmt.Errorf("raw consume read %d events, want %d", n, o.events)
		}
		raw := float64(n) / time.Since(t).Seconds()
		raws = append(raws, raw)

		runtime.GC()
		cfg := replay.DefaultClickHouseConfig(bc)
		if o.replayBatch > 0 {
			cfg.BatchRows = o.replayBatch
		}
		if o.inserters > 0 {
			cfg.Inserters = o.inserters
		}
		if cluster.On() {
			cfg.Cluster, cfg.Dial = cluster.Name, dialer(o)
		}
		if prof != nil {
			if err := pprof.StartCPUProfile(prof); err != nil {
				return err
			}
		}
		res, err := buildOnly(ctx, cfg, conn, pool)
		if prof != nil {
			pprof.StopCPUProfile()
			prof = nil // the first replay round only
		}
		if err != nil {
			return err
		}
		if res.Events != int64(o.events) {
			return fmt.Errorf("replay inserted %d events, want %d", res.Events, o.events)
		}
		rep := float64(res.Events) / res.Elapsed.Seconds()
		replays = append(replays, rep)
		fmt.Printf("round %d                        raw consume %10.0f events/s   replay %10.0f events/s (%.1fs: raw table %.1fs, rollups %.1fs)\n",
			round, raw, rep, res.Elapsed.Seconds(), res.Load.Seconds(), res.Rollups.Seconds())
	}
	ceiling, err := insertCeiling(ctx, conn, cluster, o.events, events, from, step)
	if err != nil {
		return err
	}
	raw, rep := median(raws), median(replays)
	fmt.Printf("raw consume (median)           %10.0f events/s (kafka.Reader.ReadConcurrently as the replay reads, every record decoded, nothing stored)\n", raw)
	fmt.Printf("replay (median)                %10.0f events/s = %.0f%% of raw consume\n", rep, rep/raw*100)
	into := "a raw table"
	if cluster.On() {
		into = "the Distributed raw table (insert_distributed_sync, as the replay inserts)"
	}
	fmt.Printf("clickhouse insert ceiling      %10.0f events/s (the same rows straight into %s without views, 250,000 a batch, 2 at once)\n", ceiling, into)
	fmt.Printf("replay / insert ceiling        %10.0f%%   %s\n", rep/ceiling*100, goal(true, rep/ceiling*100 >= goalReplayRatio, fmt.Sprintf(">= %.0f%% of the ceiling", goalReplayRatio)))
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rawConsume reads the request-log topic from the oldest offset to the
// high watermark of every partition with the replay's reader
// (kafka.Reader.ReadConcurrently), decodes every record, and returns how
// many events it held.
func rawConsume(ctx context.Context, bc kafka.Config) (int64, error) {
	r, err := kafka.NewReader(bc)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	topic := bc.Topic(kafka.TopicRequestLogs)
	ends, err := r.Ends(topic)
	if err != nil {
		return 0, err
	}
	var events atomic.Int64
	_, err = r.ReadConcurrently(ctx, topic, nil, ends, 256, func(_ context.Context, _ int32, msgs []*sarama.ConsumerMessage) error {
		var buf []requestlog.Event
		for _, m := range msgs {
			var err error
			if buf, err = requestlog.DecodeBatch(m.Value, buf[:0]); err != nil {
				return err
			}
			events.Add(int64(len(buf)))
		}
		return nil
	})
	return events.Load(), err
}

// insertCeiling inserts the benchmark's n rows straight into a raw table
// without views, as the replay's inserters do (250,000 rows a batch, two
// at once), and returns the rate: what ClickHouse takes at best, whatever
// reads the topic. On a cluster (c.On()) the raw table is a Distributed
// one over replicated tables and the inserts wait for every shard, as the
// replay's do.
func insertCeiling(ctx context.Context, conn driver.Conn, c requestlogview.Cluster, n int, events []requestlog.Event, from time.Time, step time.Duration) (float64, error) {
	t := requestlogview.LiveTables().Suffixed("__ceiling")
	stmts, err := requestlogview.TableDDL(t)
	drops := t.All()
	if c.On() {
		stmts, err = requestlogview.ClusterTableDDL(t, c, fmt.Sprintf("_%x", time.Now().UnixNano()))
		drops = append(drops, t.Suffixed(requestlogview.LocalSuffix).All()...)
		for i := range drops {
			drops[i] = c.Database + "." + drops[i] + " ON CLUSTER " + c.Name
		}
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	}
	if err != nil {
		return 0, err
	}
	for _, stmt := range stmts {
		if err := conn.Exec(ctx, stmt); err != nil {
			return 0, err
		}
	}
	defer func() {
		for _, table := range drops {
			_ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
		}
	}()
	const batch = 250_000
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(batch)) - batch
				if i >= n || failed.Load() != nil {
					return
				}
				var rows sinks.RequestLogRows
				for j := i; j < min(i+batch, n); j++ {
					e := events[j%len(events)]
					e.CreatedAt = from.Add(time.Duration(j) * step)
					rows.Add(0, int64(j), 0, &e)
				}
				if err := rows.InsertInto(ctx, conn, t.Raw); err != nil {
					failed.Store(&err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return 0, *p
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// buildOnly builds the shadow tables of a ClickHouse replay and drops them
// instead of swapping them in: the build is what the benchmark measures.
func buildOnly(ctx context.Context, cfg replay.ClickHouseConfig, conn driver.Conn, pool *pgxpool.Pool) (replay.Result, error) {
	t, err := replay.NewClickHouse(cfg, conn, pool, sinks.RequestLogCodec{})
	if err != nil {
		return replay.Result{}, err
	}
	start := time.Now()
	err = t.Shadow(ctx, func(int64, int64) {})
	if derr := t.Drop(context.WithoutCancel(ctx)); err == nil {
		err = derr
	}
	res := t.Result()
	res.Elapsed = time.Since(start)
	return res, err
}

// scratchPostgres creates a database beside admin's, migrated as `cfgd
// migrate` would (the replay reads the request-log writers' offset bases and
// takes its lock there), and returns a pool on it and the func that drops
// it. A scratch database, not the served one, so a benchmark never fences
// or bases a running cfgd's request log.
func scratchPostgres(ctx context.Context, admin string) (*pgxpool.Pool, func(), error) {
	cfg, err := pgxpool.ParseConfig(admin)
	if err != nil {
		return nil, nil, fmt.Errorf("-postgres: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "cfgd_bench_replay_" + hex.EncodeToString(b)
	adm, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres (the replay's lock and offset bases): %w", err)
	}
	if _, err := adm.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		adm.Close()
		return nil, nil, fmt.Errorf("postgres (the replay's lock and offset bases): %w", err)
	}
	drop := func() {
		_, _ = adm.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		adm.Close()
	}
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = schemas.UpPostgres(ctx, pool, quiet())
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		drop()
		return nil, nil, fmt.Errorf("postgres scratch database: %w", err)
	}
	return pool, func() { pool.Close(); drop() }, nil
}

// scratchCluster creates a scratch database on every server of cluster
// -cluster (the replay creates its tables there ON CLUSTER, as on a
// deployed cluster) and returns a connection to it on the server
// -clickhouse names, the cluster and the func that drops it everywhere.
func scratchCluster(ctx context.Context, o options, prefix string) (driver.Conn, requestlogview.Cluster, func(), error) {
	if err := requestlogview.ValidClusterName(o.cluster); err != nil {
		return nil, requestlogview.Cluster{}, nil, err
	}
	opts, err := clickhouse.ParseDSN(o.clickhouse)
	if err != nil {
		return nil, requestlogview.Cluster{}, nil, fmt.Errorf("-clickhouse: %w", err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		return nil, requestlogview.Cluster{}, nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := requestlogview.Cluster{Name: o.cluster, Database: prefix + hex.EncodeToString(b)}
	if err := admin.Exec(ctx, "CREATE DATABASE "+c.Database+" ON CLUSTER "+c.Name); err != nil {
		_ = admin.Close()
		return nil, c, nil, fmt.Errorf("clickhouse cluster %s at %s: %w", c.Name, o.clickhouse, err)
	}
	opts.Auth.Database = c.Database
	opts.MaxOpenConns = 8
	conn, err := clickhouse.Open(opts)
	drop := func() {
		if conn != nil {
			_ = conn.Close()
		}
		if o.keep {
			fmt.Println("kept database", c.Database, "on cluster", c.Name)
		} else if err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+c.Database+" ON CLUSTER "+c.Name); err != nil {
			fmt.Fprintf(os.Stderr, "loadgen: drop database %s on cluster %s: %v\n", c.Database, c.Name, err)
		}
		_ = admin.Close()
	}
	if err != nil {
		drop()
		return nil, c, nil, err
	}
	return conn, c, drop, nil
}

// dialer reaches one server of the cluster with -clickhouse's credentials
// (the replay's retention drops partitions shard by shard).
func dialer(o options) requestlogview.Dialer {
	return func(_ context.Context, addr string) (driver.Conn, error) {
		opts, err := clickhouse.ParseDSN(o.clickhouse)
		if err != nil {
			return nil, err
		}
		opts.Addr = []string{addr}
		return clickhouse.Open(opts)
	}
}
