package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/cfgd/cfgd/deploy/buildinfo"
	"github.com/cfgd/cfgd/events/kafka"
)

// broker runs the embedded Kafka-protocol broker alone, on
// KAFKA__EMBEDDED_ADDR with its log and login in KAFKA__DATA_DIR, until ctx
// ends. serve, workers and the CLI then share one broker that outlives any
// of them: they reach it with KAFKA__BROKERS and the KAFKA__SASL_* login
// from its client.properties. KAFKA__BROKERS itself is ignored here, so one
// settings file can serve the broker and its clients.
func broker(ctx context.Context, log *slog.Logger, app appSettings, stdout io.Writer) error {
	c := app.Core
	log.Info("cfgd broker starting", buildinfo.Read().LogAttrs()...)
	emb, err := kafka.StartEmbedded(c.KafkaDataDir, c.KafkaEmbeddedAddr)
	if err != nil {
		return fmt.Errorf("embedded kafka (KAFKA__EMBEDDED_ADDR, KAFKA__DATA_DIR): %w", err)
	}
	login := emb.SASL()
	props := filepath.Join(c.KafkaDataDir, kafka.ClientPropertiesFile)
	log.Info("embedded kafka started", "addr", emb.Addr(), "data_dir", c.KafkaDataDir)
	// The password stays in the file (mode 0600); it is never printed.
	fmt.Fprintf(stdout, "cfgd broker is up\n  kafka    %s\n  login    %s\n  clients  KAFKA__BROKERS=%s KAFKA__SASL_MECHANISM=%s KAFKA__SASL_USERNAME=%s KAFKA__SASL_PASSWORD=<sasl.password of the login file>\n",
		emb.Addr(), props, emb.Addr(), login.Mechanism, login.User)
	<-ctx.Done()
	// Close flushes the log to the data directory.
	emb.Close()
	log.Info("cfgd broker stopped")
	return nil
}
