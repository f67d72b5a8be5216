package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
)

// migrate applies Postgres and ClickHouse migrations once and reports a
// down server as one line rather than waiting for it.
func migrate(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
	c := app.Core
	d, err := openDeps(ctx, c)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := reach(ctx, postgresDep(d)); err != nil {
		return err
	}
	if err := schemas.UpPostgres(ctx, d.pg, log); err != nil {
		return err
	}
	if err := schemas.UpClickHouseOn(ctx, c.ClickHouseURL, app.RequestLog.Sink.Cluster, app.RequestLog.Sink.RetentionDays, log); err != nil {
		return fmt.Errorf("clickhouse (CLICKHOUSE__URL): %w", err)
	}
	_, err = fmt.Fprintln(stdout, "migrations applied")
	return err
}
