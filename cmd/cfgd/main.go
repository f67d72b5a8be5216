// Command cfgd is the whole service in one binary. This package only wires
// packages together; behaviour lives in commands, events, projections,
// readmodels and api.
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
)

const usage = `usage: cfgd <command> [flags]

commands:
  serve     run HTTP + gRPC, the event relay, projections and reactors
  migrate   apply database migrations and exit
  user create-superuser --email E [--password P]
            create a staff superuser (without --password: OTP sign-in only)
  deadletters list
            print the events projections gave up on (time, projection,
            stream, version, type, reason, origin), oldest first
  help      show this text

Settings come from the environment, then the .env file named by
CFGD_ENV_FILE (default ./.env), then defaults. See README.md.
`

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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: 2}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "serve", "migrate", "user", "deadletters":
	default:
		fmt.Fprintf(stderr, "cfgd: unknown command %q\n\n%s", cmd, usage)
		return &exitError{code: 2}
	}
	var userCmd func(ctx context.Context, log *slog.Logger, app appSettings) error
	if cmd == "user" {
		// Flags are checked before settings, so a usage mistake is reported
		// as one, whatever the environment holds.
		var err error
		if userCmd, err = parseUserCommand(rest, stdout, stderr); err != nil {
			return err
		}
	} else if cmd == "deadletters" {
		if len(rest) != 1 || rest[0] != "list" {
			return &exitError{code: 2, err: fmt.Errorf("usage: cfgd deadletters list")}
		}
	} else if len(rest) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", cmd, rest)}
	}
	envFile := os.Getenv("CFGD_ENV_FILE")
	if envFile == "" {
		envFile = ".env"
	}
	src, err := settings.Load(envFile)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	r := settings.NewReader(src)
	app, err := readApp(r)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return &exitError{code: 2, err: err}
	}
	log := newLogger(stderr, app.Core.LogLevel)
	switch cmd {
	case "migrate":
		return migrate(ctx, log, app.Core)
	case "user":
		return userCmd(ctx, log, app)
	case "deadletters":
		return deadletters(ctx, app.Core, stdout)
	default:
		return serve(ctx, log, app, stdout)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
