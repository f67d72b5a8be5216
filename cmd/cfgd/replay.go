package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/projections/replay"
)

// replayCommand is `cfgd replay NAME... | --all | --list`.
func replayCommand() *cobra.Command {
	var (
		all, list, partial bool
		batch              int
	)
	cmd := &cobra.Command{
		Use:   "replay NAME... | --all | --list",
		Short: "rebuild projections into shadow tables and swap them in",
		Long: `replay rebuilds projections into shadow tables and swaps them in while serve
keeps running: Postgres ones from the event store and the Kafka topics that
also feed them (API-key usage, task lifecycle), ` + replay.RequestLogName + ` from the
request-log topic. --all rebuilds every read-model projection (reactors never
replay); --list shows every projection with its kind, the logs it is built
from, its tables, checkpoint and lag.`,
		Example: `  cfgd replay --list
  cfgd replay identity.users apikey.keys
  cfgd replay --all`,
		// Names come from the registry, which needs the databases: no
		// completion of names, and no file names either.
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, names []string) error {
			act, err := parseReplay(names, all, list, partial, batch, cmd.OutOrStdout())
			if err != nil {
				if len(names) == 0 && !all && !list {
					fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
				}
				return err
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), act)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every read-model projection, Postgres and ClickHouse")
	cmd.Flags().BoolVar(&list, "list", false, "list the projections with their tables, checkpoint and lag")
	cmd.Flags().IntVar(&batch, "batch", replay.DefaultBatchSize, "events per transaction")
	cmd.Flags().BoolVar(&partial, "allow-partial", false, "swap in a rebuild of "+replay.RequestLogName+
		" although it lacks rows the live tables hold: records Kafka's retention deleted, or records it dead-lettered (they are lost)")
	return cmd
}

// parseReplay checks a replay's arguments before any setting is read;
// names are looked up in the registry once the modules are built.
func parseReplay(names []string, all, list, partial bool, batch int, stdout io.Writer) (action, error) {
	modes := 0
	for _, on := range []bool{all, list, len(names) > 0} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return nil, &exitError{code: 2, err: errors.New("replay takes projection names, --all or --list (one of them)")}
	}
	cfg := replay.Config{BatchSize: batch, LockTimeout: replay.DefaultLockTimeout, AllowPartial: partial}
	if err := cfg.Validate(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return func(ctx context.Context, log *slog.Logger, app appSettings) error {
		return runReplay(ctx, log, app, names, all, list, cfg, stdout)
	}, nil
}

// runReplay replays names (or every read model with all, or lists them
// with list) from the registry serve runs: the modules, built as serve
// builds them but with the Kafka a command talks to.
func runReplay(ctx context.Context, log *slog.Logger, app appSettings, names []string, all, list bool, cfg replay.Config, stdout io.Writer) error {
	// On a cluster the replay's loss check reads the live tables through
	// caught-up replicas only, as serve's reads do.
	d, err := openDeps(ctx, app.Core, withClickHouseCluster(app.RequestLog.Sink.Cluster))
	if err != nil {
		return err
	}
	defer d.Close()
	reg, err := events.NewRegistry(eventTypes()...)
	if err != nil {
		return err
	}
	mods, err := buildModules(ctx, wiring{log: log, app: app, deps: d, bus: clientBus(app.Core)})
	if err != nil {
		return err
	}
	rr, err := registry(d, reg, mods)
	if err != nil {
		return err
	}
	if list {
		return listReplayables(ctx, rr, stdout)
	}
	var chosen []replay.Replayable
	for _, n := range names {
		e, ok := rr.Lookup(n)
		switch {
		case !ok:
			return &exitError{code: 2, err: fmt.Errorf("unknown projection %q (cfgd replay --list shows them)", n)}
		case e.Target == nil:
			return &exitError{code: 2, err: fmt.Errorf("%s %w", n, replay.ErrReactor)}
		}
		chosen = append(chosen, e)
	}
	if all {
		for _, e := range rr.All() {
			if e.Target != nil {
				chosen = append(chosen, e)
			}
		}
	}
	for _, e := range chosen {
		if err := replayOne(ctx, d, e, cfg, stdout); err != nil {
			return err
		}
	}
	return nil
}

// listReplayables prints every entry with its kind, logs, tables and how
// far its live builder is.
func listReplayables(ctx context.Context, rr *replay.Registry, stdout io.Writer) error {
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tKIND\tLOG\tTABLES\tSTREAMS\tPOSITION\tLAG")
	for _, e := range rr.All() {
		st, err := e.Status(ctx)
		if err != nil {
			return err
		}
		streams, pos, lag := fmt.Sprint(st.Streams), fmt.Sprint(st.Position), fmt.Sprint(st.Lag)
		if st.Streams < 0 {
			streams = "-"
		}
		if st.Position < 0 {
			pos, lag = "?", "?"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, strings.Join(e.Logs, " + "), strings.Join(e.Tables, ","), streams, pos, lag)
	}
	return w.Flush()
}

// replayOne replays e, with a progress bar on a terminal and a line every
// few seconds otherwise.
func replayOne(ctx context.Context, d *deps, e replay.Replayable, cfg replay.Config, stdout io.Writer) error {
	f, isFile := stdout.(*os.File)
	progress, feed, finish := newProgress(stdout, isFile && term.IsTerminal(int(f.Fd())), e.Name, e.Unit)
	cfg.FeedProgress = feed
	t, err := e.Target(cfg)
	if err != nil {
		return err
	}
	res, err := replay.Rebuild(ctx, d.pg, t, progress)
	finish(err)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: interrupted; the live tables are untouched, run the replay again to rebuild: %w", e.Name, err)
		}
		return err
	}
	fmt.Fprintln(stdout, e.Summary(res))
	return nil
}

// barWidth is the bar's own width in cells. A fixed width, not the
// terminal's: a full-width bar shrinks to nothing when the description
// and counters fill the line (a feed's name is long).
const barWidth = 30

// newProgress reports a replay's progress in unit (events, records) on
// stdout: a bar on a terminal, a line every few seconds otherwise. feed
// reports a projection's Kafka feed (in records) the same way; finish ends
// the bar once the replay returned err.
func newProgress(stdout io.Writer, terminal bool, name, unit string) (progress func(done, total int64), feed func(feed string, read, total int64), finish func(err error)) {
	var bar *progressbar.ProgressBar
	if terminal {
		bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(stdout),
			progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(barWidth),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(stdout) }),
		)
		progress = func(done, total int64) {
			bar.Describe(name)
			bar.ChangeMax64(max(total, 1))
			_ = bar.Set64(done)
		}
		// A feed's records take the bar over while it reads its topic.
		feed = func(f string, read, total int64) {
			bar.Describe(name + " feed " + f + " (records)")
			bar.ChangeMax64(max(total, 1))
			_ = bar.Set64(read)
		}
	} else {
		progress = everyFewSeconds(stdout, name, unit)
		feeds := map[string]func(int64, int64){}
		feed = func(f string, read, total int64) {
			if feeds[f] == nil {
				feeds[f] = everyFewSeconds(stdout, name+" feed "+f, "records")
			}
			feeds[f](read, total)
		}
	}
	return progress, feed, func(err error) {
		if bar == nil {
			return
		}
		if err == nil {
			_ = bar.Finish()
		} else {
			_ = bar.Exit()
			fmt.Fprintln(stdout)
		}
	}
}

// everyFewSeconds prints a progress line at most every 2 s, and the last.
func everyFewSeconds(stdout io.Writer, name, unit string) func(done, total int64) {
	var start, last time.Time
	return func(done, total int64) {
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		if now.Sub(last) >= 2*time.Second || done == total {
			last = now
			fmt.Fprintln(stdout, progressLine(name, unit, done, total, now.Sub(start)))
		}
	}
}

// progressLine is the plain progress report in unit: done/total, rate
// and ETA.
func progressLine(name, unit string, done, total int64, elapsed time.Duration) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	eta := "?"
	if rate > 0 {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	return fmt.Sprintf("%s: %d/%d %s (%.1f%%), %.0f %s/s, ETA %s", name, done, total, unit, pct, rate, unit, eta)
}
