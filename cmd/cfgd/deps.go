package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/outbox"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// deps are the connections every command shares. All are lazy: creating
// them never blocks on a server that is down.
type deps struct {
	pg *pgxpool.Pool
	// commits ticks after this process appended events; the relay wakes
	// on it.
	commits *store.CommitSignal
	ch      driver.Conn
	chOpts  *clickhouse.Options
	redis   *redis.Client
	// events carries the append limits (EVENTS__MAX_BYTES) every command
	// handler gets.
	events *store.Store
}

// depsOption configures openDeps.
type depsOption func(*depsConfig)

type depsConfig struct{ clickHouseCluster string }

// withClickHouseCluster opens ClickHouse for a cluster (CLICKHOUSE__CLUSTER;
// empty: one server): clusterReads.
func withClickHouseCluster(name string) depsOption {
	return func(c *depsConfig) { c.clickHouseCluster = name }
}

// clusterReads makes every query of the connection read through replicas
// less than a second behind only. With load_balancing in_order a shard's
// first replica that fails and returns is read again as soon as it
// answers, before it has fetched what the other replica took meanwhile:
// the statistics would come out too low. 18.16 reports such a replica's
// delay as the age of the oldest insert it has not fetched (without end
// until it has loaded its replication queue), so it is passed over until
// it caught up; with
// no replica of a shard under a second behind, a read fails rather than
// answer short (the read model answers that 503: requestlogview). The request-log sink reads
// its offset check with its own settings (sinks.RequestLogs), and a
// replay the tables it writes (replay.ClickHouse).
func clusterReads(o *clickhouse.Options) {
	if o.Settings == nil {
		o.Settings = clickhouse.Settings{}
	}
	maps.Copy(o.Settings, requestlogview.CaughtUpReads())
}

// postgresDeps is openDeps for a command that only writes or reads
// Postgres: it waits for Postgres and brings its tables up to date.
func postgresDeps(ctx context.Context, log *slog.Logger, app appSettings) (*deps, error) {
	d, err := openDeps(ctx, app.Core)
	if err != nil {
		return nil, err
	}
	if err := reach(ctx, postgresDep(d)); err != nil {
		d.Close()
		return nil, err
	}
	if err := schemas.UpPostgres(ctx, d.pg, log); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// wakeRelay tells a running server's relay about the new event; no relay
// runs in this process.
func wakeRelay(ctx context.Context, log *slog.Logger, d *deps) {
	if err := outbox.Notify(ctx, d.pg); err != nil {
		log.WarnContext(ctx, "the running server's relay was not woken; it will find the event on its next poll", "err", err)
	}
}

func openDeps(ctx context.Context, c settings.Core, opts ...depsOption) (*deps, error) {
	var cfg depsConfig
	for _, o := range opts {
		o(&cfg)
	}
	pgCfg, err := pgxpool.ParseConfig(c.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("POSTGRES__URL: %w", config.RedactError(err, c.PostgresURL))
	}
	pgCfg.MaxConns = 32
	commits := store.WatchCommits(pgCfg)
	pg, err := pgxpool.NewWithConfig(ctx, pgCfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", config.RedactError(err, c.PostgresURL))
	}
	chOpts, err := clickhouse.ParseDSN(c.ClickHouseURL)
	if err != nil {
		pg.Close()
		return nil, fmt.Errorf("CLICKHOUSE__URL: %w", config.RedactError(err, c.ClickHouseURL))
	}
	chOpts.DialTimeout = 2 * time.Second
	if cfg.clickHouseCluster != "" {
		clusterReads(chOpts)
	}
	ch, err := clickhouse.Open(chOpts)
	if err != nil {
		pg.Close()
		return nil, fmt.Errorf("clickhouse: %w", config.RedactError(err, c.ClickHouseURL))
	}
	redisOpts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		pg.Close()
		_ = ch.Close()
		return nil, fmt.Errorf("REDIS__URL: %w", config.RedactError(err, c.RedisURL))
	}
	events, err := store.New(store.Config{MaxEventBytes: c.EventMaxBytes})
	if err != nil {
		pg.Close()
		_ = ch.Close()
		return nil, fmt.Errorf("EVENTS__MAX_BYTES: %w", err)
	}
	return &deps{pg: pg, commits: commits, ch: ch, chOpts: chOpts, redis: redis.NewClient(redisOpts), events: events}, nil
}

// dialClickHouse opens a connection to one server of a ClickHouse
// cluster (host:port) with CLICKHOUSE__URL's credentials and database.
func (d *deps) dialClickHouse(_ context.Context, addr string) (driver.Conn, error) {
	o := *d.chOpts
	o.Addr = []string{addr}
	conn, err := clickhouse.Open(&o)
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", addr, err)
	}
	return conn, nil
}

func (d *deps) Close() {
	d.pg.Close()
	_ = d.ch.Close()
	_ = d.redis.Close()
}

// retry runs fn until it succeeds or ctx ends, logging which dependency is
// down and backing off up to 10s, so a missing server at start-up is a
// clear log line and a 503 from /readyz, not a crash loop.
func retry(ctx context.Context, log *slog.Logger, what string, fn func(ctx context.Context) error) error {
	bo := process.Backoff(250*time.Millisecond, 10*time.Second)
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 1 {
				log.InfoContext(ctx, "dependency available", "dependency", what, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d, _ := bo.Next()
		log.WarnContext(ctx, "dependency unavailable, retrying", "dependency", what, "err", err, "retry_in", d.String())
		if !process.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}
