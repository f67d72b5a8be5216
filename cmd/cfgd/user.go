package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/outbox"
)

const userUsage = `usage: cfgd user create-superuser --email E [--password P]
`

// parseUserCommand checks the arguments of `cfgd user ...` and returns the
// command to run once settings are read.
func parseUserCommand(args []string, stdout, stderr io.Writer) (action, error) {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, userUsage)
		return nil, &exitError{code: 0}
	}
	if len(args) == 0 || args[0] != "create-superuser" {
		fmt.Fprint(stderr, userUsage)
		if len(args) == 0 {
			return nil, &exitError{code: 2}
		}
		return nil, &exitError{code: 2, err: fmt.Errorf("unknown user command %q", args[0])}
	}
	fs := flag.NewFlagSet("cfgd user create-superuser", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, userUsage) }
	email := fs.String("email", "", "the superuser's e-mail address (required)")
	password := fs.String("password", "", "the password for the admin login; omit for OTP sign-in only")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{code: 0}
		}
		return nil, &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("create-superuser takes no arguments, got %q", fs.Args())}
	}
	cmd := user.CreateSuperuser{Email: *email, Password: *password, Meta: events.Metadata{Actor: "cli"}}
	// Check the input before any connection is made.
	if _, err := cmd.Check(); err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return func(ctx context.Context, log *slog.Logger, app appSettings) error {
		return createSuperuser(ctx, log, app, cmd, stdout)
	}, nil
}

func createSuperuser(ctx context.Context, log *slog.Logger, app appSettings, cmd user.CreateSuperuser, stdout io.Writer) error {
	d, err := openDeps(ctx, app.Core)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := d.pg.Ping(ctx); err != nil {
		return fmt.Errorf("postgres is unreachable (POSTGRES__URL): %w", err)
	}
	if err := migrations.Up(ctx, d.pg, log); err != nil {
		return err
	}
	core, err := signin.New(app.Signin, signin.Deps{Pool: d.pg, Events: d.events, Redis: d.redis, Log: log, Now: time.Now})
	if err != nil {
		return err
	}
	u, err := core.CreateSuperuser.Handle(ctx, cmd)
	if err != nil {
		if user.IsInputError(err) {
			return &exitError{code: 1, err: err}
		}
		return err
	}
	// No relay runs in this process; wake the one of a running server.
	if err := outbox.Notify(ctx, d.pg); err != nil {
		log.WarnContext(ctx, "the running server's relay was not woken; it will find the user on its next poll", "err", err)
	}
	fmt.Fprintf(stdout, "superuser created: id=%d email=%s\n", u.ID, u.Email)
	if cmd.Password == "" {
		fmt.Fprintln(stdout, "no password set: this user signs in with an e-mailed code only")
	}
	return nil
}
