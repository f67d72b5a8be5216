package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/deploy/migrations"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/outbox"
)

const apikeyUsage = `usage: cfgd apikey create --name N --type service|cli|webhook|internal|development --user EMAIL [--expires 720h]
       cfgd apikey revoke --id N
`

// parseAPIKeyCommand checks the arguments of `cfgd apikey ...` and returns
// the command to run once settings are read.
func parseAPIKeyCommand(args []string, stdout, stderr io.Writer) (action, error) {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, apikeyUsage)
		return nil, &exitError{code: 0}
	}
	if len(args) == 0 || (args[0] != "create" && args[0] != "revoke") {
		fmt.Fprint(stderr, apikeyUsage)
		if len(args) == 0 {
			return nil, &exitError{code: 2}
		}
		return nil, &exitError{code: 2, err: fmt.Errorf("unknown apikey command %q", args[0])}
	}
	fs := flag.NewFlagSet("cfgd apikey "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, apikeyUsage) }
	var (
		name    = fs.String("name", "", "the key's name (required)")
		typ     = fs.String("type", "", "service, cli, webhook, internal or development (required)")
		owner   = fs.String("user", "", "the owner's e-mail address (required)")
		expires = fs.Duration("expires", 0, "lifetime, e.g. 720h; default: never expires")
		id      = fs.Int64("id", 0, "the key to revoke")
	)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{code: 0}
		}
		return nil, &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("apikey %s takes no arguments, got %q", args[0], fs.Args())}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if args[0] == "revoke" {
		for _, f := range []string{"name", "type", "user", "expires"} {
			if set[f] {
				return nil, &exitError{code: 2, err: fmt.Errorf("apikey revoke takes only --id, not --%s", f)}
			}
		}
		if *id < 1 {
			return nil, &exitError{code: 2, err: errors.New("--id: a positive key id is required")}
		}
		cmd := apikeys.Revoke{ID: *id, RevokedBy: "cli", Meta: events.Metadata{Actor: "cli"}}
		return func(ctx context.Context, log *slog.Logger, app appSettings) error {
			return revokeAPIKey(ctx, log, app, cmd, stdout)
		}, nil
	}
	if set["id"] {
		return nil, &exitError{code: 2, err: errors.New("apikey create does not take --id")}
	}
	if set["expires"] && *expires <= 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("--expires: a positive duration such as 720h is required, got %s", *expires)}
	}
	cmd := apikeys.Create{Name: *name, KeyType: *typ, UserEmail: *owner, CreatedBy: "cli", Meta: events.Metadata{Actor: "cli"}}
	// Check the input before any connection is made; the expiry is fixed
	// when the command runs.
	if _, err := cmd.Check(time.Now()); err != nil {
		return nil, &exitError{code: 2, err: cliFields(err)}
	}
	return func(ctx context.Context, log *slog.Logger, app appSettings) error {
		if *expires > 0 {
			at := time.Now().Add(*expires)
			cmd.ExpiresAt = &at
		}
		return createAPIKey(ctx, log, app, cmd, stdout)
	}, nil
}

// cliFields names the flags behind a validation error.
func cliFields(err error) error {
	flagOf := map[string]string{"name": "--name", "key_type": "--type", "user_email": "--user", "expires_at": "--expires"}
	msg := err.Error()
	for f, fl := range flagOf {
		msg = strings.ReplaceAll(msg, f+":", fl+":")
	}
	return errors.New(msg)
}

func apikeyDeps(ctx context.Context, log *slog.Logger, app appSettings) (*deps, error) {
	d, err := openDeps(ctx, app.Core)
	if err != nil {
		return nil, err
	}
	if err := d.pg.Ping(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("postgres is unreachable (POSTGRES__URL): %w", err)
	}
	if err := migrations.Up(ctx, d.pg, log); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func createAPIKey(ctx context.Context, log *slog.Logger, app appSettings, cmd apikeys.Create, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := apikeyDeps(ctx, log, app)
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := apikeys.NewCreateHandler(d.events.Bind(d.pg), time.Now).Handle(ctx, cmd)
	if err != nil {
		if apikeys.IsInputError(err) {
			return &exitError{code: 1, err: cliFields(err)}
		}
		return err
	}
	wakeRelay(ctx, log, d)
	s := c.State
	exp := "never"
	if s.ExpiresAt != nil {
		exp = s.ExpiresAt.Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "API key created: id=%d name=%q type=%s user=%s expires=%s\n", s.ID, s.Name, s.KeyType, s.UserEmail, exp)
	fmt.Fprintln(stdout, "Store the key now; it is not shown again:")
	fmt.Fprintln(stdout, c.Key)
	return nil
}

func revokeAPIKey(ctx context.Context, log *slog.Logger, app appSettings, cmd apikeys.Revoke, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := apikeyDeps(ctx, log, app)
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := apikeys.NewRevokeHandler(d.events.Bind(d.pg), time.Now).Handle(ctx, cmd)
	if err != nil {
		if apikeys.IsInputError(err) {
			return &exitError{code: 1, err: fmt.Errorf("API key %d: %w", cmd.ID, err)}
		}
		return err
	}
	wakeRelay(ctx, log, d)
	fmt.Fprintf(stdout, "API key revoked: id=%d name=%q (%s)\n", s.ID, s.Name, apikey.Stream(s.ID))
	return nil
}

// wakeRelay tells a running server's relay about the new event; no relay
// runs in this process.
func wakeRelay(ctx context.Context, log *slog.Logger, d *deps) {
	if err := outbox.Notify(ctx, d.pg); err != nil {
		log.WarnContext(ctx, "the running server's relay was not woken; it will find the event on its next poll", "err", err)
	}
}
