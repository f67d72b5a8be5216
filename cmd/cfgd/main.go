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
		fmt.Fprintln(os.Stderr, "cfgd:", strings.ReplaceAll(err.Error(), "\n", "\ncfgd: "))
	}
	os.Exit(code)
}

// action is a parsed command, run once settings are read.
type action func(ctx context.Context, log *slog.Logger, app appSettings) error

// command is one entry of the CLI: the single list usage and dispatch
// both come from.
type command struct {
	name  string
	usage string // the lines under "commands:"
	// parse checks the arguments before any setting is read, so a usage
	// mistake is reported as one whatever the environment holds.
	parse func(args []string, stdout, stderr io.Writer) (action, error)
}

func commandList() []command {
	return []command{
		{"serve", "serve     run HTTP, gRPC, the event relay, the projections and every module's runners", noArgs("serve", serve)},
		{"migrate", "migrate   apply database migrations and exit", noArgs("migrate", migrate)},
		{"worker", "worker    run a task worker process (TASKS__* settings)", noArgs("worker", runWorker)},
		{"broker", "broker    run the embedded Kafka broker alone (KAFKA__EMBEDDED_ADDR, KAFKA__DATA_DIR) for serve, workers and the CLI to share", noArgs("broker", broker)},
		{"task", "task enqueue --queue Q --type T [--payload JSON]\n          put a task on a queue", parseTaskCommand},
		{"user", "user create-superuser --email E [--password P]\n          create a staff superuser (without --password: OTP sign-in only)", parseUserCommand},
		{"deadletters", "deadletters list\n          print the events projections set aside (dead-letter topic), one line each", parseDeadletters},
		{"replay", "replay NAME... | --all | --list\n          rebuild projections (Postgres from the event store, ClickHouse from the request-log topic) into shadow tables and swap them in", parseReplay},
		{"apikey", "apikey create --name N --type service|cli|webhook|internal|development --user EMAIL [--expires 720h]\n          create an API key and print it once\napikey revoke --id N\n          revoke an API key", parseAPIKeyCommand},
	}
}

func usage(cmds []command) string {
	var b strings.Builder
	b.WriteString("usage: cfgd <command> [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(c.usage, "\n", "\n  "))
	}
	b.WriteString("  help      show this text\n\nSettings come from the environment, then the .env file named by\nCFGD_ENV_FILE (default ./.env), then defaults. See README.md.\n")
	return b.String()
}

func noArgs(name string, fn func(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error) func([]string, io.Writer, io.Writer) (action, error) {
	return func(args []string, stdout, _ io.Writer) (action, error) {
		if len(args) > 0 {
			return nil, &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", name, args)}
		}
		return func(ctx context.Context, log *slog.Logger, app appSettings) error { return fn(ctx, log, app, stdout) }, nil
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := commandList()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage(cmds))
		return &exitError{code: 2}
	}
	name, rest := args[0], args[1:]
	if name == "help" || name == "-h" || name == "--help" {
		fmt.Fprint(stdout, usage(cmds))
		return nil
	}
	var act action
	for _, c := range cmds {
		if c.name == name {
			var err error
			if act, err = c.parse(rest, stdout, stderr); err != nil {
				return err
			}
		}
	}
	if act == nil {
		fmt.Fprintf(stderr, "cfgd: unknown command %q\n\n%s", name, usage(cmds))
		return &exitError{code: 2}
	}
	envFile := os.Getenv("CFGD_ENV_FILE")
	if envFile == "" {
		envFile = ".env"
	}
	src, err := settings.Load(envFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	r := config.NewReader(src)
	app, err := readApp(r)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	log := newLogger(stderr, app.Core.LogLevel)
	// Packages that log without a logger of their own (web.Internal, for
	// one) honour LOG__LEVEL and the JSON format too.
	slog.SetDefault(log)
	return act(ctx, log, app)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
