package main

import (
	"net"
	"os"
	"strings"

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
		SASL:         kafka.SASL{Mechanism: c.KafkaSASLMechanism, User: c.KafkaSASLUser, Password: c.KafkaSASLPassword.Reveal()},
		YieldBackoff: c.KafkaYieldBackoff}
	if len(b.Brokers) == 0 {
		b.Brokers = []string{c.KafkaEmbeddedAddr}
		if login, err := kafka.ReadEmbeddedLogin(c.KafkaDataDir); err == nil {
			b.SASL = login
		}
	}
	return b
}

// replicaID is serve's REPLICA__ID, or one made of the host name and the
// HTTP port, which tell replicas apart on separate hosts and on one host
// alike and stay the same across a restart. With port 0 nothing stable
// is left: "" (dynamic consumer-group members).
func replicaID(c settings.Core) string {
	if c.ReplicaID != "" {
		return c.ReplicaID
	}
	_, port, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil || port == "0" || port == "" {
		return ""
	}
	host, err := os.Hostname()
	if err != nil {
		return ""
	}
	// A host name may hold what a group.instance.id may not.
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, host)
	return id[:min(len(id), 90)] + "-" + port
}
