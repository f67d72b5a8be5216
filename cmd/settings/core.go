package settings

import (
	"time"

	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/store"
)

// Core holds the settings every cfgd command shares (DESIGN.md section 5).
type Core struct {
	HTTPAddr      string
	GRPCAddr      string
	PostgresURL   string
	ClickHouseURL string
	RedisURL      string

	KafkaBrokers      []string // empty: run the embedded broker
	KafkaDataDir      string
	KafkaEmbeddedAddr string
	KafkaPartitions   int
	KafkaTopicPrefix  string

	LogLevel        string
	ShutdownTimeout time.Duration

	// MetricsAddr, when set, serves /metrics on a listener of its own
	// (and not on HTTPAddr); MetricsToken, when set, is required as a
	// bearer token.
	MetricsAddr  string
	MetricsToken config.Secret

	// KafkaSASL logs in to a real cluster (KAFKA__SASL_*); the embedded
	// broker makes its own login.
	KafkaSASLMechanism string
	KafkaSASLUser      string
	KafkaSASLPassword  config.Secret
	// EventSigningKey signs events on the bus (EVENTS__SIGNING_KEY); unset:
	// a key file generated beside the embedded broker's data.
	EventSigningKey config.Secret
	// EventMaxBytes bounds an event's encoded size at append time
	// (EVENTS__MAX_BYTES), below the producer's 1 MiB.
	EventMaxBytes int
}

// Defaults of the core settings, shared with the README's settings table.
const (
	DefaultHTTPAddr      = "127.0.0.1:8080"
	DefaultGRPCAddr      = "127.0.0.1:50051"
	DefaultPostgresURL   = "postgres:///cfgd?host=/var/run/postgresql&user=postgres"
	DefaultClickHouseURL = "clickhouse://127.0.0.1:9000/cfgd"
	DefaultRedisURL      = "redis://127.0.0.1:6379/0"
)

// ReadCore reads the core settings; problems are left in r.
func ReadCore(r *config.Reader) Core {
	c := Core{
		HTTPAddr:           r.HostPort("HTTP__ADDR", DefaultHTTPAddr),
		GRPCAddr:           r.HostPort("GRPC__ADDR", DefaultGRPCAddr),
		PostgresURL:        r.URL("POSTGRES__URL", DefaultPostgresURL, "postgres", "postgresql"),
		ClickHouseURL:      r.URL("CLICKHOUSE__URL", DefaultClickHouseURL, "clickhouse", "tcp"),
		RedisURL:           r.URL("REDIS__URL", DefaultRedisURL, "redis", "rediss"),
		KafkaBrokers:       r.List("KAFKA__BROKERS", nil),
		KafkaDataDir:       r.String("KAFKA__DATA_DIR", "./data/kafka"),
		KafkaEmbeddedAddr:  r.HostPort("KAFKA__EMBEDDED_ADDR", "127.0.0.1:19092"),
		KafkaPartitions:    r.IntRange("KAFKA__PARTITIONS", 8, 1, 1024),
		KafkaTopicPrefix:   r.String("KAFKA__TOPIC_PREFIX", "cfgd."),
		LogLevel:           r.OneOf("LOG__LEVEL", "info", "debug", "info", "warn", "error"),
		ShutdownTimeout:    r.PositiveDuration("HTTP__SHUTDOWN_TIMEOUT", 15*time.Second),
		MetricsToken:       config.NewSecret(r.Secret("METRICS__TOKEN", false)),
		KafkaSASLMechanism: r.OneOf("KAFKA__SASL_MECHANISM", "", "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
		KafkaSASLUser:      r.String("KAFKA__SASL_USERNAME", ""),
		KafkaSASLPassword:  config.NewSecret(r.Secret("KAFKA__SASL_PASSWORD", false)),
		EventSigningKey:    config.NewSecret(r.Secret("EVENTS__SIGNING_KEY", false)),
		EventMaxBytes:      r.IntRange("EVENTS__MAX_BYTES", store.DefaultMaxEventBytes, 1024, store.DefaultMaxEventBytes),
	}
	if c.KafkaSASLMechanism != "" && (c.KafkaSASLUser == "" || !c.KafkaSASLPassword.IsSet()) {
		r.Fail("KAFKA__SASL_USERNAME", "KAFKA__SASL_USERNAME and KAFKA__SASL_PASSWORD are required with KAFKA__SASL_MECHANISM", "")
	}
	if c.EventSigningKey.IsSet() && len(c.EventSigningKey.Reveal()) < 32 {
		r.Fail("EVENTS__SIGNING_KEY", "expected a secret of at least 32 bytes", "")
	}
	if r.Has("METRICS__ADDR") {
		c.MetricsAddr = r.HostPort("METRICS__ADDR", "")
	}
	return c
}
