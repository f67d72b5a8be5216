package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/projections"
)

// deadletters runs `cfgd deadletters list`. Without KAFKA__BROKERS it reads
// the embedded broker of a running `cfgd serve`, at KAFKA__EMBEDDED_ADDR.
func deadletters(ctx context.Context, c settings.Core, stdout io.Writer) error {
	busCfg := clientBus(c)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := kafka.Ping(ctx, busCfg); err != nil {
		return fmt.Errorf("kafka at %v is unreachable (KAFKA__BROKERS; the embedded broker runs inside cfgd serve): %w", busCfg.Brokers, err)
	}
	return projections.ListDeadLetters(ctx, busCfg, stdout)
}

func parseDeadletters(args []string, stdout, stderr io.Writer) (action, error) {
	if len(args) != 1 || args[0] != "list" {
		fmt.Fprint(stderr, "usage: cfgd deadletters list\n")
		return nil, &exitError{code: 2}
	}
	return func(ctx context.Context, _ *slog.Logger, app appSettings) error {
		return deadletters(ctx, app.Core, stdout)
	}, nil
}
