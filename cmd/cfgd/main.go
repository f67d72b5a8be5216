// Command cfgd is the whole service in one binary. This package only wires
// packages together: it reads settings into each module's Config, builds
// the modules and runs them; behaviour lives in commands, events,
// projections, readmodels and api.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/deploy/config"
)

// exitError carries an exit code out of run; only main calls os.Exit.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if ee == nil || ee.err != nil {
		// Each error about a connection setting is masked where it is
		// made; this catches a password in one that was not.
		fmt.Fprintln(os.Stderr, "cfgd:", strings.ReplaceAll(config.Redact(err.Error()), "\n", "\ncfgd: "))
	}
	os.Exit(code)
}

// action is a checked command, run once settings are read.
type action func(ctx context.Context, log *slog.Logger, app appSettings) error

// run parses args with the command tree of cli.go and runs the command.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(respell(root, args, stderr))
	return root.ExecuteContext(ctx)
}

// withSettings reads every setting, then runs act, a one-shot command of
// the CLI. Commands check their flags and arguments before calling it, so
// a usage mistake is reported as one whatever the environment holds.
func withSettings(ctx context.Context, stderr io.Writer, act action) error {
	return runWithSettings(ctx, stderr, cliLog, act)
}

// logStyle is how a command logs to stderr.
type logStyle int

const (
	// cliLog is for a one-shot command a person runs at a prompt: text
	// lines, warnings and errors only (LOG__LEVEL, when set, instead).
	// What the command did goes to stdout.
	cliLog logStyle = iota
	// processLog is for a long-running process (serve, worker, broker):
	// JSON lines at LOG__LEVEL, for a log collector.
	processLog
)

func runWithSettings(ctx context.Context, stderr io.Writer, style logStyle, act action) error {
	ld, err := loadSettings()
	if err != nil {
		return err
	}
	if err := ld.problems(os.Getenv("CFGD_STRICT") == "1"); err != nil {
		return &exitError{code: 2, err: err}
	}
	level := ld.app.Core.LogLevel
	if style == cliLog && !ld.reader.Has("LOG__LEVEL") {
		level = "warn"
	}
	log := newLogger(stderr, level, style)
	// Packages that log without a logger of their own (web.Internal, for
	// one) honour LOG__LEVEL and the JSON format too.
	slog.SetDefault(log)
	for _, u := range ld.unknown {
		log.Warn("unknown setting", "name", u.Name, "did_you_mean", u.Nearest, "hint", "set CFGD_STRICT=1 to refuse unknown settings")
	}
	if names := settings.BuiltInURLs(ld.reader); len(names) > 0 {
		log.Info("using built-in defaults (the local stack and the embedded broker)", "settings", strings.Join(names, ","))
	}
	return act(ctx, log, ld.app)
}

// loaded is the settings as read, with where they came from.
type loaded struct {
	src     *config.Source
	reader  *config.Reader
	app     appSettings
	unknown []settings.Unknown
}

// loadSettings reads the environment and the .env file named by
// CFGD_ENV_FILE (default ./.env) into every module's settings.
func loadSettings() (*loaded, error) {
	envFile := os.Getenv("CFGD_ENV_FILE")
	if envFile == "" {
		envFile = ".env"
	}
	src, err := settings.Load(envFile)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	r := config.NewReader(src)
	app, err := readApp(r)
	if err != nil {
		return nil, err
	}
	return &loaded{src: src, reader: r, app: app, unknown: settings.FindUnknown(src)}, nil
}

// problems joins every bad value and, when strict, every unknown name.
func (ld *loaded) problems(strict bool) error {
	errs := []error{ld.reader.Err()}
	if strict {
		for _, u := range ld.unknown {
			errs = append(errs, u)
		}
	}
	return errors.Join(errs...)
}

func newLogger(w io.Writer, level string, style logStyle) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	if style == cliLog {
		// No time: the person reading it ran the command just now.
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
