package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cfgd/cfgd/projections/projectors"
	"github.com/cfgd/cfgd/projections/reactors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/apikeyusage"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/tasks"
)

const replayUsage = `usage: cfgd replay NAME...   rebuild projections (Postgres ones from the event store and the Kafka topics
                           that also feed them: API-key usage, task lifecycle; ` + chReplayName + `
                           from the request-log topic) and swap them in
       cfgd replay --all       rebuild every read-model projection (reactors never replay)
       cfgd replay --list      every projection with its tables, checkpoint and lag
`

// postgresProjections lists every Postgres projection the modules run, for
// replay. The task reactor is built without its queue and worker handles:
// replay only lists it, never runs it.
func postgresProjections() []*projections.Projection {
	var all []*projections.Projection
	all = append(all, projectors.Identity()...)
	all = append(all, projectors.APIKeys()...)
	all = append(all, reactors.Control(nil, nil, nil, nil), projectors.TaskQueues())
	return all
}

// withFeeds gives p the Kafka-sourced feeds its tables also hold, which
// its replay rebuilds after the events: the request log's usage counts for
// the API keys, the lifecycle topic's task statistics for the task views.
func withFeeds(p *projections.Projection, b kafka.Config, log *slog.Logger) error {
	switch p.Name {
	case projectors.KeysName:
		f, err := apikeyusage.NewFeed(apikeyusage.DefaultConfig(b), log)
		if err != nil {
			return err
		}
		p.Feeds = append(p.Feeds, f)
	case projectors.QueuesName:
		p.Feeds = append(p.Feeds, tasks.NewLifecycleFeed(b, log))
	}
	return nil
}

func parseReplay(args []string, stdout, stderr io.Writer) (action, error) {
	fs := flag.NewFlagSet("cfgd replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage) }
	all := fs.Bool("all", false, "replay every read-model projection")
	list := fs.Bool("list", false, "list the projections")
	batch := fs.Int("batch", replay.DefaultBatchSize, "events per transaction")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{code: 0}
		}
		return nil, &exitError{code: 2}
	}
	names := fs.Args()
	modes := 0
	for _, on := range []bool{*all, *list, len(names) > 0} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		fmt.Fprint(stderr, replayUsage)
		return nil, &exitError{code: 2, err: errors.New("replay takes projection names, --all or --list (one of them)")}
	}
	cfg := replay.Config{BatchSize: *batch, LockTimeout: replay.DefaultLockTimeout}
	if err := cfg.Validate(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	known := map[string]*projections.Projection{}
	for _, p := range postgresProjections() {
		known[p.Name] = p
	}
	var chosen []*projections.Projection
	clickhouseToo := *all
	for _, n := range names {
		if n == chReplayName {
			clickhouseToo = true
			continue
		}
		p, ok := known[n]
		switch {
		case !ok:
			return nil, &exitError{code: 2, err: fmt.Errorf("unknown projection %q (cfgd replay --list shows them)", n)}
		case p.Reactor:
			return nil, &exitError{code: 2, err: fmt.Errorf("%s %w", n, replay.ErrReactor)}
		}
		chosen = append(chosen, p)
	}
	if *all {
		for _, p := range postgresProjections() {
			if !p.Reactor {
				chosen = append(chosen, p)
			}
		}
	}
	return func(ctx context.Context, log *slog.Logger, app appSettings) error {
		pool, err := pgxpool.New(ctx, app.Core.PostgresURL)
		if err != nil {
			return fmt.Errorf("POSTGRES__URL: %w", err)
		}
		defer pool.Close()
		if *list {
			return listProjections(ctx, pool, app, log, stdout)
		}
		reg, err := events.NewRegistry(eventTypes()...)
		if err != nil {
			return err
		}
		b := clientBus(app.Core)
		for _, p := range chosen {
			if err := withFeeds(p, b, log); err != nil {
				return err
			}
		}
		for _, p := range chosen {
			if err := replayOne(ctx, pool, reg, p, cfg, stdout); err != nil {
				return err
			}
		}
		if clickhouseToo {
			return replayClickHouse(ctx, pool, app, stdout)
		}
		return nil
	}, nil
}

func listProjections(ctx context.Context, pool *pgxpool.Pool, app appSettings, log *slog.Logger, stdout io.Writer) error {
	ps := postgresProjections()
	// Each projection names the logs it is built from: the event store and
	// the topics of its feeds.
	logs := map[string]string{}
	b := clientBus(app.Core)
	for _, p := range ps {
		if err := withFeeds(p, b, log); err != nil {
			return err
		}
		names := []string{"event store"}
		for _, f := range p.Feeds {
			names = append(names, f.Topic())
		}
		logs[p.Name] = strings.Join(names, " + ")
	}
	st, err := replay.List(ctx, pool, ps)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tKIND\tLOG\tTABLES\tSTREAMS\tPOSITION\tLAG")
	for _, s := range st {
		kind := "read model"
		if s.Reactor {
			kind = "reactor"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Name, kind, logs[s.Name], strings.Join(s.Tables, ","), s.Streams, s.Position, s.Lag)
	}
	fmt.Fprintln(w, clickhouseListLine(ctx, app))
	return w.Flush()
}

// replayOne replays p, with a progress bar on a terminal and a line every
// few seconds otherwise.
func replayOne(ctx context.Context, pool *pgxpool.Pool, reg *events.Registry, p *projections.Projection, cfg replay.Config, stdout io.Writer) error {
	progress, feed, finish := newProgress(stdout, p.Name, "events")
	cfg.FeedProgress = feed
	res, err := replay.Run(ctx, pool, reg, p, cfg, progress)
	finish(err)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: interrupted; the live tables are untouched, run the replay again to rebuild: %w", p.Name, err)
		}
		return err
	}
	feeds := ""
	if len(p.Feeds) > 0 {
		feeds = fmt.Sprintf(" and %d records of its feeds", res.Records)
	}
	fmt.Fprintf(stdout, "%s: replayed %d events (%d applied)%s in %s, swapped in\n", p.Name, res.Events, res.Applied, feeds, res.Elapsed.Round(time.Millisecond))
	return nil
}

// newProgress reports a replay's progress in unit (events, records) on
// stdout: a bar on a terminal, a line every few seconds otherwise. feed
// reports a projection's Kafka feed (in records) the same way; finish ends
// the bar once the replay returned err.
func newProgress(stdout io.Writer, name, unit string) (progress func(done, total int64), feed func(feed string, read, total int64), finish func(err error)) {
	var bar *progressbar.ProgressBar
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(stdout),
			progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(unit),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
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
			fmt.Fprintln(stdout, progressLineOf(name, unit, done, total, now.Sub(start)))
		}
	}
}

// progressLine is the plain progress report in events: done/total, rate
// and ETA.
func progressLine(name string, done, total int64, elapsed time.Duration) string {
	return progressLineOf(name, "events", done, total, elapsed)
}

// progressLineOf is progressLine in unit.
func progressLineOf(name, unit string, done, total int64, elapsed time.Duration) string {
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
