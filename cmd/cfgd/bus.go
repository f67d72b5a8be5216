package main

import (
	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events/kafka"
)

// clientBus is the Kafka a command other than serve talks to: the
// configured cluster (with KAFKA__SASL_*), or the embedded broker of a
// running `cfgd serve`, whose login that serve keeps in KAFKA__DATA_DIR.
// Without that file (no serve has run here) the login is left empty and
// the broker refuses the connection, which the caller reports.
func clientBus(c settings.Core) kafka.Config {
	b := kafka.Config{Brokers: c.KafkaBrokers, Partitions: c.KafkaPartitions, TopicPrefix: c.KafkaTopicPrefix,
		SASL: kafka.SASL{Mechanism: c.KafkaSASLMechanism, User: c.KafkaSASLUser, Password: c.KafkaSASLPassword.Reveal()}}
	if len(b.Brokers) == 0 {
		b.Brokers = []string{c.KafkaEmbeddedAddr}
		if login, err := kafka.ReadEmbeddedLogin(c.KafkaDataDir); err == nil {
			b.SASL = login
		}
	}
	return b
}
