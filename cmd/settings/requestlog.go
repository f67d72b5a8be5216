package settings

import (
	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/sinks"
)

// RequestLog is the request-log settings: the producer behind the ingest
// endpoints and the ClickHouse requestlog. Their Bus is filled in by serve once
// the broker addresses are known.
type RequestLog struct {
	Producer requestlogkafka.ProducerConfig
	Sink     sinks.RequestLogConfig
}

func newRequestLogTarget() *RequestLog {
	return &RequestLog{Producer: requestlogkafka.DefaultProducerConfig(kafka.Config{}), Sink: sinks.DefaultRequestLogConfig(kafka.Config{})}
}

func (t *RequestLog) fields() []field {
	p, s := &t.Producer, &t.Sink
	return []field{
		intRange(&s.RetentionDays, "CLICKHOUSE__RETENTION_DAYS", "raw partitions older than this many days are dropped", 1, 36500),
		str(&s.Cluster, "CLICKHOUSE__CLUSTER", "ClickHouse cluster (a `<remote_servers>` name with `<distributed_ddl>`, macros `{shard}` and `{replica}`) the request-log tables span; empty: one server. `cfgd migrate` creates replicated `<table>_local` tables and `Distributed` tables under the usual names `ON CLUSTER`; `serve` then creates nothing in ClickHouse (see docs/scaling.md)"),
		intRange(&s.BatchRows, "REQUESTLOG__BATCH_ROWS", "sink block size (rows)", 1, 1_000_000),
		positive(&s.BatchWait, "REQUESTLOG__BATCH_WAIT", "sink block time bound"),
		positive(&s.BatchGap, "REQUESTLOG__BATCH_GAP", "least time between two sink inserts: a block goes in as soon as the sink has read every partition to its end, but at most one per gap, so at most 1/gap new parts per second per table"),
		positive(&s.RetentionEvery, "REQUESTLOG__RETENTION_EVERY", "how often old partitions are dropped"),
		str(&s.Group, "REQUESTLOG__CONSUMER_GROUP", "the sink's consumer group"),
		intRange(&p.PackEvents, "REQUESTLOG__PACK_EVENTS", "events per Kafka record", 1, 4096),
		positive(&p.Timeout, "REQUESTLOG__PRODUCE_TIMEOUT", "how long an ingest call waits for Kafka before 503 (the producer gives a record up at most 23 s + 55 × this after: keep it at most 1 s, so a keyed call settles its key within 90 s, requestlog.SettleWithin)"),
		mebibytes(&p.MaxInFlightBytes, "REQUESTLOG__MAX_IN_FLIGHT_MB", "producer memory bound (MiB)", 1, 4096),
	}
}

// ReadRequestLog reads the request-log settings; problems are left in r.
func ReadRequestLog(r *config.Reader) RequestLog {
	t := newRequestLogTarget()
	readAll(r, t.fields())
	return *t
}
