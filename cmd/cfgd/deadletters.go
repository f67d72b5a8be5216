package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events/kafka"
)

// deadletters runs `cfgd deadletters list`. Without KAFKA__BROKERS it reads
// the embedded broker of a running `cfgd serve`, at KAFKA__EMBEDDED_ADDR.
func deadletters(ctx context.Context, c settings.Core, stdout io.Writer) error {
	busCfg := clientBus(c)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := reach(ctx, kafkaDep(c)); err != nil {
		return err
	}
	return kafka.ListDeadLetters(ctx, busCfg, stdout)
}

// deadlettersCommand is `cfgd deadletters list`.
func deadlettersCommand() *cobra.Command {
	list := &cobra.Command{
		Use:   "list",
		Short: "print the events projections set aside (dead-letter topic), one line each",
		Long: `list prints the events projections set aside on the dead-letter topic, one line
each: time, projection, stream, version, type, reason, origin. Without
KAFKA__BROKERS it reads the embedded broker of a running cfgd serve.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSettings(cmd.Context(), cmd.ErrOrStderr(), func(ctx context.Context, _ *slog.Logger, app appSettings) error {
				return deadletters(ctx, app.Core, cmd.OutOrStdout())
			})
		},
	}
	return parentCommand("deadletters", "inspect the events projections set aside", list)
}
