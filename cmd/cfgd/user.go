package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
)

// userCommand is `cfgd user create-superuser`.
func userCommand() *cobra.Command {
	var email, password string
	create := &cobra.Command{
		Use:   "create-superuser --email E [--password P]",
		Short: "create a staff superuser (without --password: OTP sign-in only)",
		Long: `create-superuser creates a staff superuser. The password is hashed with
argon2id; without one the user signs in with an e-mailed code only.`,
		Example: "  cfgd user create-superuser --email admin@example.com --password 'correct horse battery'",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := user.CreateSuperuser{Email: email, Password: password, Meta: events.Metadata{Actor: "cli"}}
			// Check the input before any connection is made.
			if _, err := c.Check(); err != nil {
				return &exitError{code: 2, err: err}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return createSuperuser(ctx, log, app, c, cmd.OutOrStdout())
			})
		},
	}
	create.Flags().StringVar(&email, "email", "", "the superuser's e-mail address (required)")
	create.Flags().StringVar(&password, "password", "", "the password for the admin login; omit for OTP sign-in only")
	return parentCommand("user", "manage staff users", create)
}

func createSuperuser(ctx context.Context, log *slog.Logger, app appSettings, cmd user.CreateSuperuser, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := postgresDeps(ctx, log, app)
	if err != nil {
		return err
	}
	defer d.Close()
	core, err := signin.New(app.Signin, signin.Deps{Pool: d.pg, Events: d.events, Redis: d.redis, Log: log, Now: time.Now})
	if err != nil {
		return err
	}
	logGeneratedKeys(log, core.Generated)
	u, err := core.CreateSuperuser.Handle(ctx, cmd)
	if err != nil {
		if user.IsInputError(err) {
			return &exitError{code: 1, err: err}
		}
		return err
	}
	wakeRelay(ctx, log, d)
	fmt.Fprintf(stdout, "superuser created: id=%d email=%s\n", u.ID, u.Email)
	if cmd.Password == "" {
		fmt.Fprintln(stdout, "no password set: this user signs in with an e-mailed code only")
	}
	return nil
}
