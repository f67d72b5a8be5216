package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events/bus"
	"github.com/cfgd/cfgd/projections"
)

// deadletters runs `cfgd deadletters list`. Without KAFKA__BROKERS it reads
// the embedded broker of a running `cfgd serve`, at KAFKA__EMBEDDED_ADDR.
func deadletters(ctx context.Context, c settings.Core, stdout io.Writer) error {
	busCfg := bus.Config{Brokers: c.KafkaBrokers, Partitions: c.KafkaPartitions, TopicPrefix: c.KafkaTopicPrefix}
	if len(busCfg.Brokers) == 0 {
		busCfg.Brokers = []string{c.KafkaEmbeddedAddr}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := bus.Ping(ctx, busCfg); err != nil {
		return fmt.Errorf("kafka at %v is unreachable (KAFKA__BROKERS; the embedded broker runs inside cfgd serve): %w", busCfg.Brokers, err)
	}
	return projections.ListDeadLetters(ctx, busCfg, stdout)
}
