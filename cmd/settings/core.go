package settings

import (
	"time"

	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/store"
)

// Core holds the settings every cfgd command shares (docs/settings.md, "Core").
type Core struct {
	HTTPAddr      string
	GRPCAddr      string
	PostgresURL   string
	ClickHouseURL string
	RedisURL      string
	// GRPCProtoDir is where the proto files are written and served from.
	GRPCProtoDir string

	KafkaBrokers      []string // empty: run the embedded broker
	KafkaDataDir      string
	KafkaEmbeddedAddr string
	KafkaPartitions   int
	KafkaTopicPrefix  string
	// KafkaYieldBackoff is how long a consumer that met a record only a
	// newer cfgd understands stays out of its group (KAFKA__YIELD_BACKOFF).
	KafkaYieldBackoff time.Duration
	// ReplicaID names this serve among the replicas sharing one broker
	// (REPLICA__ID); empty: derived from the host name and HTTP port.
	ReplicaID string

	LogLevel        string
	ShutdownTimeout time.Duration

	// MetricsAddr, when set, serves /metrics on a listener of its own
	// (and not on HTTPAddr); MetricsToken, when set, is required as a
	// bearer token.
	MetricsAddr  string
	MetricsToken config.Secret
	// MetricsPprof serves Go's profiles (/debug/pprof/) beside /metrics
	// on MetricsAddr, behind MetricsToken (METRICS__PPROF).
	MetricsPprof bool

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
	// MemoryLimit is serve's soft memory limit in bytes
	// (SERVE__MEMORY_LIMIT_MB; 0: none).
	MemoryLimit int64
}

// DefaultCore is the core settings with nothing set: the one place their
// defaults are written (Table and docs/settings.md show them from here).
func DefaultCore() Core {
	return Core{
		HTTPAddr:          "127.0.0.1:8080",
		GRPCAddr:          "127.0.0.1:50051",
		PostgresURL:       "postgres:///cfgd?host=/var/run/postgresql&user=postgres",
		ClickHouseURL:     "clickhouse://127.0.0.1:9000/cfgd",
		RedisURL:          "redis://127.0.0.1:6379/0",
		GRPCProtoDir:      "./data/protos",
		KafkaDataDir:      "./data/kafka",
		KafkaEmbeddedAddr: "127.0.0.1:19092",
		KafkaPartitions:   8,
		KafkaTopicPrefix:  "cfgd.",
		KafkaYieldBackoff: kafka.DefaultYieldBackoff,
		LogLevel:          "info",
		ShutdownTimeout:   15 * time.Second,
		EventMaxBytes:     store.DefaultMaxEventBytes,
		MemoryLimit:       240 << 20,
	}
}

func coreFields(c *Core) []field {
	return []field{
		hostPort(&c.HTTPAddr, "HTTP__ADDR", "HTTP listen address"),
		positive(&c.ShutdownTimeout, "HTTP__SHUTDOWN_TIMEOUT", "how long SIGINT/SIGTERM waits for in-flight requests"),
		hostPort(&c.GRPCAddr, "GRPC__ADDR", "gRPC listen address"),
		str(&c.GRPCProtoDir, "GRPC__PROTO_DIR", "where the proto files are written (at start-up, and by `POST /cfg/grpc/proto-files/generate/`) and served from"),
		urlOf(&c.PostgresURL, "POSTGRES__URL", "event store and read models", "postgres", "postgresql"),
		urlOf(&c.ClickHouseURL, "CLICKHOUSE__URL", "analytics store (database created by `migrate`)", "clickhouse", "tcp"),
		urlOf(&c.RedisURL, "REDIS__URL", "task queues and throttles", "redis", "rediss"),
		list(&c.KafkaBrokers, "KAFKA__BROKERS", "comma-separated brokers; empty runs the embedded broker"),
		str(&c.KafkaDataDir, "KAFKA__DATA_DIR", "embedded broker's log and login file (`client.properties`), in `serve` or `cfgd broker`"),
		hostPort(&c.KafkaEmbeddedAddr, "KAFKA__EMBEDDED_ADDR", "embedded broker's listen address, in `serve` or `cfgd broker`"),
		intRange(&c.KafkaPartitions, "KAFKA__PARTITIONS", "partitions of topics cfgd creates (1..1024)", 1, 1024),
		str(&c.KafkaTopicPrefix, "KAFKA__TOPIC_PREFIX", "prefix of cfgd's topic names (`cfgd.events`, `cfgd.deadletters`, `cfgd.tasks.lifecycle`)"),
		positive(&c.KafkaYieldBackoff, "KAFKA__YIELD_BACKOFF", "how long a consumer that meets a record only a newer cfgd understands (a rolling upgrade) stays out of its consumer group, so a newer replica takes the partition, before it joins again; it never skips the record (see [operations](operations.md#mixed-versions))"),
		str(&c.ReplicaID, "REPLICA__ID", "this `serve`'s name among the replicas sharing one broker: stable across its restarts, different for every replica (two with one id fence each other, and `/readyz` says `fenced`). Its consumer-group members are static (`group.instance.id` = group + `.` + id), so a restart takes back its partitions without a rebalance; 1 to 100 letters, digits, `.`, `_`, `-`. Empty: the host name and `HTTP__ADDR`'s port (`web-1-8080`); with port 0, dynamic members"),
		oneOf(&c.LogLevel, "LOG__LEVEL", "`debug`, `info`, `warn` or `error`; logs are JSON on stderr (every line, the default logger included)", "debug", "info", "warn", "error"),
		optHostPort(&c.MetricsAddr, "METRICS__ADDR", "serve `/metrics` on a listener of its own (say `127.0.0.1:9090`) instead of `HTTP__ADDR`"),
		secret(&c.MetricsToken, "METRICS__TOKEN", "when set, `/metrics` needs `Authorization: Bearer <token>`"),
		boolean(&c.MetricsPprof, "METRICS__PPROF", "serve Go's runtime profiles (`/debug/pprof/`: heap, CPU, goroutines) beside `/metrics` on `METRICS__ADDR` (required with it, so they are never on the public port), behind `METRICS__TOKEN` too; for `go tool pprof http://127.0.0.1:9090/debug/pprof/heap`"),
		oneOf(&c.KafkaSASLMechanism, "KAFKA__SASL_MECHANISM", "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` to log in to a real cluster or a `cfgd broker` (`SCRAM-SHA-256`, user and password in its `client.properties`); the embedded broker of `serve` makes its own login",
			"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
		str(&c.KafkaSASLUser, "KAFKA__SASL_USERNAME", "the login's user name (with `KAFKA__SASL_MECHANISM`)"),
		secret(&c.KafkaSASLPassword, "KAFKA__SASL_PASSWORD", "the login's password (never logged)"),
		secret(&c.EventSigningKey, "EVENTS__SIGNING_KEY", "key (at least 32 bytes) of the HMAC every event on the bus carries; empty: `event-signing.key` in `AUTH__KEYS_DIR` when `cfgd keys generate` wrote it, else a key file generated on first run beside `KAFKA__DATA_DIR` (`./data/signing.key`, mode 0600). Every `serve` and `worker` of one deployment needs the same key (it also signs the task lifecycle records, request logs and API-key usage)"),
		mebibytes(&c.MemoryLimit, "SERVE__MEMORY_LIMIT_MB", "soft memory limit of `serve`'s Go runtime in MiB (`debug.SetMemoryLimit`; `GOMEMLIMIT` in the environment wins; 0: none). The garbage collector works harder as the process nears it, so a `serve` at its max ingest rate stays under 300 MB resident instead of about twice its live heap (some 130 MB with the default request-log settings: [benchmarks](benchmarks.md#issue-31-point-4-cfgd-serves-memory-at-its-max-ingest-rate)); raise it with `REQUESTLOG__BATCH_ROWS`, `REQUESTLOG__MAX_IN_FLIGHT_MB` or `KAFKA__PARTITIONS`, since past it the collector takes up to half the CPU", 0, 1<<20),
		intRange(&c.EventMaxBytes, "EVENTS__MAX_BYTES", "largest encoded event accepted at append time (1024 up to this default; the producer's limit is 1 MiB)", 1024, store.DefaultMaxEventBytes),
	}
}

// ReadCore reads the core settings; problems are left in r.
func ReadCore(r *config.Reader) Core {
	c := DefaultCore()
	readAll(r, coreFields(&c))
	if c.MetricsPprof && c.MetricsAddr == "" {
		r.Fail("METRICS__PPROF", "false unless METRICS__ADDR is set (the profiles are served on the metrics listener only, never on HTTP__ADDR)", "true")
	}
	if c.KafkaSASLMechanism != "" && (c.KafkaSASLUser == "" || !c.KafkaSASLPassword.IsSet()) {
		r.Fail("KAFKA__SASL_USERNAME", "KAFKA__SASL_USERNAME and KAFKA__SASL_PASSWORD are required with KAFKA__SASL_MECHANISM", "")
	}
	if c.ReplicaID != "" {
		if kafka.ValidReplica(c.ReplicaID) != nil {
			r.Fail("REPLICA__ID", "1 to 100 letters, digits, '.', '_' or '-'", c.ReplicaID)
		}
	}
	if c.EventSigningKey.IsSet() && len(c.EventSigningKey.Reveal()) < 32 {
		r.Fail("EVENTS__SIGNING_KEY", "expected a secret of at least 32 bytes", "")
	}
	return c
}
