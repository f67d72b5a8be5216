package main

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
)

// ingestPath is the real request-log path into conn's tables: a producer,
// a broker (embedded unless -brokers) and a running sink, records signed
// and verified as cfgd serve does unless -unsigned.
type ingestPath struct {
	prod  *requestlogkafka.Producer
	sink  *sinks.RequestLogs
	batch time.Duration // the sink's batch gap
	close func()
}

func startIngestPath(ctx context.Context, o options, conn driver.Conn) (*ingestPath, error) {
	bc, closeBus, err := benchBus(o)
	if err != nil {
		return nil, err
	}
	pc := requestlogkafka.DefaultProducerConfig(bc)
	pc.Timeout = 10 * time.Second
	sc := sinks.DefaultRequestLogConfig(bc)
	sc.Group = "bench"
	if o.batchGap > 0 {
		sc.BatchGap = o.batchGap
	}
	if !o.unsigned {
		key := make([]byte, events.MinSigningKeyBytes)
		_, _ = rand.Read(key)
		signer, err := events.NewSigner(key)
		if err != nil {
			closeBus()
			return nil, err
		}
		pc.Signer, sc.Signer = signer, signer
	}
	prod, err := requestlogkafka.NewProducer(pc, quiet())
	if err != nil {
		closeBus()
		return nil, err
	}
	s, err := sinks.NewRequestLogs(sc, conn, quiet())
	if err != nil {
		prod.Close()
		closeBus()
		return nil, err
	}
	sctx, stopSink := context.WithCancel(ctx)
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- s.Run(sctx) }()
	p := &ingestPath{prod: prod, sink: s, batch: sc.BatchGap, close: func() {
		stopSink()
		<-sinkDone
		prod.Close()
		closeBus()
	}}
	for s.Ready(ctx) != nil {
		if err := ctx.Err(); err != nil {
			p.close()
			return nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, nil
}

// directInsertRate is events/s of clickhouse-go columnar batches of
// 50,000 rows of events straight into conn's tables (views included): the
// direct-insert baseline the ingest figures are ratios of.
func directInsertRate(ctx context.Context, conn driver.Conn, n int, chunk func(i, n int) []requestlog.Event) (float64, error) {
	start := time.Now()
	for i := 0; i < n; i += 50_000 {
		var rows sinks.RequestLogRows
		for j, e := range chunk(i, min(50_000, n-i)) {
			rows.Add(0, int64(i+j), 0, &e)
		}
		if err := rows.Insert(ctx, conn); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// queryIngestRate is the rate of the ingest stream that runs beside the
// query benchmark: -query-ingest-rate, or -query-ingest-of-baseline times
// a direct-insert baseline of 1M rows measured now in a scratch database.
func queryIngestRate(ctx context.Context, o options) (int, error) {
	if o.queryIngestOf <= 0 {
		return o.queryIngestRate, nil
	}
	conn, drop, err := scratch(ctx, o, "cfgd_bench_raw_")
	if err != nil {
		return 0, err
	}
	defer drop()
	pool := synth(mrand.New(mrand.NewPCG(1, 2)), 100_000, time.Now().UTC(), 0)
	base, err := directInsertRate(ctx, conn, 1_000_000, func(i, n int) []requestlog.Event {
		i %= len(pool)
		if i+n > len(pool) {
			i = 0
		}
		return pool[i : i+n]
	})
	if err != nil {
		return 0, err
	}
	rate := int(o.queryIngestOf * base)
	fmt.Printf("direct-insert baseline %.0f events/s; ingest beside the queries at %.2f of it: %d events/s\n", base, o.queryIngestOf, rate)
	return rate, nil
}

// ingestStream is events produced through p at rate events/s, stamped
// with the time they are produced (so they land in the windows' newest
// minutes, as a live server's do), until stop.
type ingestStream struct {
	p        *ingestPath
	produced atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	err      atomic.Pointer[error]
	start    time.Time
}

func startIngestStream(ctx context.Context, p *ingestPath, rate, callEvents, callers int) *ingestStream {
	sctx, cancel := context.WithCancel(ctx)
	st := &ingestStream{p: p, cancel: cancel, start: time.Now()}
	var next atomic.Int64
	for c := range callers {
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			// Each caller its own events, restamped before every call.
			evs := synth(mrand.New(mrand.NewPCG(5, uint64(c))), callEvents, time.Now(), 0)
			for sctx.Err() == nil {
				i := next.Add(int64(callEvents)) - int64(callEvents)
				// Paced: event i is due i/rate seconds after the start.
				time.Sleep(time.Until(st.start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))))
				now := time.Now().UTC()
				for k := range evs {
					evs[k].CreatedAt = now
				}
				if err := p.prod.Produce(sctx, evs); err != nil {
					if sctx.Err() == nil {
						st.err.Store(&err)
					}
					return
				}
				st.produced.Add(int64(len(evs)))
			}
		}()
	}
	return st
}

// stop ends the stream and returns the rate it produced at.
func (st *ingestStream) stop() (float64, error) {
	st.cancel()
	st.wg.Wait()
	rate := float64(st.produced.Load()) / time.Since(st.start).Seconds()
	if p := st.err.Load(); p != nil {
		return rate, fmt.Errorf("ingest beside the queries: %w", *p)
	}
	return rate, nil
}
