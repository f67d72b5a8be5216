package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/readmodels/apikeyview"
)

// apikeyCommand is `cfgd apikey create|list|revoke`.
func apikeyCommand() *cobra.Command {
	var (
		name, typ, owner string
		expires          time.Duration
	)
	create := &cobra.Command{
		Use:   "create --name N --type T --user EMAIL [--expires D]",
		Short: "create an API key and print it once",
		Long: `create makes an API key for an existing, active user and prints it once:
only its hash is stored.`,
		Example: "  cfgd apikey create --name ci --type service --user admin@example.com --expires 30d",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("expires") && expires <= 0 {
				return &exitError{code: 2, err: fmt.Errorf("--expires: a positive duration such as 720h or 30d is required, got %s", newDaysDuration(&expires))}
			}
			c := apikeys.Create{Name: name, KeyType: typ, UserEmail: owner, CreatedBy: "cli", Meta: events.Metadata{Actor: "cli"}}
			// Check the input before any connection is made; the expiry
			// is fixed when the command runs.
			if _, err := c.Check(time.Now()); err != nil {
				return &exitError{code: 2, err: cliFields(err)}
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				if expires > 0 {
					at := time.Now().Add(expires)
					c.ExpiresAt = &at
				}
				return createAPIKey(ctx, log, app, c, cmd.OutOrStdout())
			})
		},
	}
	f := create.Flags()
	f.StringVar(&name, "name", "", "the key's name (required)")
	f.StringVar(&typ, "type", "", "service, cli, webhook, internal or development (required)")
	f.StringVar(&owner, "user", "", "the owner's e-mail address (required)")
	f.Var(newDaysDuration(&expires), "expires", "lifetime, e.g. 720h or 30d; default: never expires")

	var id int64
	revoke := &cobra.Command{
		Use:     "revoke --id N",
		Short:   "revoke an API key",
		Long:    "revoke ends an API key; every running serve refuses it within about a second.",
		Example: "  cfgd apikey revoke --id 3",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id < 1 {
				return &exitError{code: 2, err: errors.New("--id: a positive key id is required")}
			}
			c := apikeys.Revoke{ID: id, RevokedBy: "cli", Meta: events.Metadata{Actor: "cli"}}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return revokeAPIKey(ctx, log, app, c, cmd.OutOrStdout())
			})
		},
	}
	revoke.Flags().Int64Var(&id, "id", 0, "the key to revoke (required)")

	var (
		listType string
		active   bool
		asJSON   bool
	)
	list := &cobra.Command{
		Use:     "list [--type T] [--active] [--json]",
		Short:   "list API keys (masked), with their owners and usage",
		Long:    "list prints every API key from the read model, newest first: masked key, owner, usage and state. Keys are never shown whole.",
		Example: "  cfgd apikey list --active\n  cfgd apikey list --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := apikeyview.Filter{KeyType: listType}
			if active {
				f.IsActive = &active
			}
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, log *slog.Logger, app appSettings) error {
				return listAPIKeys(ctx, log, app, f, asJSON, cmd.OutOrStdout())
			})
		},
	}
	list.Flags().StringVar(&listType, "type", "", "only keys of this type")
	list.Flags().BoolVar(&active, "active", false, "only active keys")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON (the REST list's item shape) instead of a table")
	return parentCommand("apikey", "create, list and revoke API keys", create, list, revoke)
}

func listAPIKeys(ctx context.Context, log *slog.Logger, app appSettings, f apikeyview.Filter, asJSON bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := postgresDeps(ctx, log, app)
	if err != nil {
		return err
	}
	defer d.Close()
	q := apikeyview.NewKeys(d.pg, time.Now)
	var keys []apikeyview.Key
	for page := 1; ; page++ {
		batch, total, err := q.List(ctx, f, apikeyview.Page{Number: page, Size: apikeyview.MaxPageSize})
		if err != nil {
			return err
		}
		keys = append(keys, batch...)
		if len(batch) == 0 || int64(len(keys)) >= total {
			break
		}
	}
	if asJSON {
		if keys == nil {
			keys = []apikeyview.Key{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(keys)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTYPE\tKEY\tUSER\tACTIVE\tVALID\tREQUESTS\tLAST USED\tEXPIRES")
	when := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, k := range keys {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%t\t%t\t%d\t%s\t%s\n", k.ID, k.Name, k.KeyType, k.MaskedKey, k.UserEmail,
			k.IsActive, k.IsValid, k.RequestCount, when(k.LastUsedAt, "-"), when(k.ExpiresAt, "never"))
	}
	return tw.Flush()
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

func createAPIKey(ctx context.Context, log *slog.Logger, app appSettings, cmd apikeys.Create, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := postgresDeps(ctx, log, app)
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
	d, err := postgresDeps(ctx, log, app)
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
