package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/cmd/cfgd/schemas"
	"github.com/cfgd/cfgd/deploy/migrate"
)

func migrateCommand() *cobra.Command {
	var dryRun bool
	c := plainCommand("migrate", cliLog, "apply database migrations and exit (status: what is applied; --dry-run: what would run)",
		`migrate applies the Postgres migrations and creates the ClickHouse tables, then exits.
With --dry-run it changes nothing and prints each pending migration with the
statements it would run; "cfgd migrate status" lists applied and pending ones.`,
		func(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
			if dryRun {
				return migratePlan(ctx, app, stdout, true)
			}
			return runMigrations(ctx, log, app, stdout)
		})
	c.Args = commandArgs
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print what would run, change nothing")
	c.AddCommand(plainCommand("status", cliLog, "list applied and pending migrations of Postgres and ClickHouse",
		"status lists every Postgres and ClickHouse migration, applied (with when) or pending.\nIt changes nothing: not even goose's version tables are created.",
		func(ctx context.Context, _ *slog.Logger, app appSettings, stdout io.Writer) error {
			return migratePlan(ctx, app, stdout, false)
		}))
	return c
}

// runMigrations applies Postgres and ClickHouse migrations once and
// reports a down server as one line rather than waiting for it.
func runMigrations(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
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
	if err := schemas.UpClickHouseOn(ctx, c.ClickHouseURL, app.RequestLog.Sink.Cluster, log); err != nil {
		return fmt.Errorf("clickhouse (CLICKHOUSE__URL): %w", err)
	}
	_, err = fmt.Fprintln(stdout, "migrations applied")
	return err
}

// migratePlan prints the state of every migration (status) or the
// pending ones with their statements (dry run).
func migratePlan(ctx context.Context, app appSettings, stdout io.Writer, dryRun bool) error {
	c := app.Core
	d, err := openDeps(ctx, c)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := reach(ctx, postgresDep(d)); err != nil {
		return err
	}
	pg, err := schemas.PlanPostgres(ctx, d.pg)
	if err != nil {
		return fmt.Errorf("postgres (POSTGRES__URL): %w", err)
	}
	ch, err := schemas.PlanClickHouse(ctx, c.ClickHouseURL, app.RequestLog.Sink.Cluster)
	if err != nil {
		return fmt.Errorf("clickhouse (CLICKHOUSE__URL): %w", err)
	}
	for _, store := range []struct {
		name  string
		steps []migrate.Step
	}{{"postgres", pg}, {"clickhouse", ch}} {
		if dryRun {
			printPending(stdout, store.name, store.steps)
		} else {
			printStatus(stdout, store.name, store.steps)
		}
	}
	return nil
}

func printStatus(w io.Writer, store string, steps []migrate.Step) {
	pending := 0
	for _, s := range steps {
		if !s.Applied {
			pending++
		}
	}
	fmt.Fprintf(w, "%s: %d applied, %d pending\n", store, len(steps)-pending, pending)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range steps {
		state := "pending"
		if s.Applied {
			state = "applied " + s.AppliedAt.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", s.File, state)
	}
	_ = tw.Flush()
}

func printPending(w io.Writer, store string, steps []migrate.Step) {
	n := 0
	for _, s := range steps {
		if s.Applied {
			continue
		}
		if n == 0 {
			fmt.Fprintf(w, "%s: would apply\n", store)
		}
		n++
		fmt.Fprintf(w, "-- %s\n%s\n\n", s.File, s.Up)
	}
	if n == 0 {
		fmt.Fprintf(w, "%s: nothing to apply\n", store)
	}
}
