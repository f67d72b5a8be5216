package settings

import (
	"time"

	"github.com/cfgd/cfgd/deploy/config"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	sink "github.com/cfgd/cfgd/projections/requestlog"
)

// RequestLog is the request-log settings: the producer behind the ingest
// endpoints and the ClickHouse requestlog. Their Bus is filled in by serve once
// the broker addresses are known.
type RequestLog struct {
	Producer requestlog.ProducerConfig
	Sink     sink.Config
}

// ReadRequestLog reads the request-log settings; problems are left in r.
func ReadRequestLog(r *config.Reader) RequestLog {
	p := requestlog.DefaultProducerConfig(kafka.Config{})
	s := sink.DefaultConfig(kafka.Config{})
	p.PackEvents = r.IntRange("REQUESTLOG__PACK_EVENTS", p.PackEvents, 1, 4096)
	p.Timeout = r.PositiveDuration("REQUESTLOG__PRODUCE_TIMEOUT", p.Timeout)
	p.MaxInFlightBytes = int64(r.IntRange("REQUESTLOG__MAX_IN_FLIGHT_MB", int(p.MaxInFlightBytes>>20), 1, 4096)) << 20
	s.RetentionDays = r.IntRange("CLICKHOUSE__RETENTION_DAYS", s.RetentionDays, 1, 36500)
	s.BatchRows = r.IntRange("REQUESTLOG__BATCH_ROWS", s.BatchRows, 1, 1_000_000)
	s.BatchWait = r.PositiveDuration("REQUESTLOG__BATCH_WAIT", s.BatchWait)
	s.RetentionEvery = r.PositiveDuration("REQUESTLOG__RETENTION_EVERY", time.Hour)
	s.Group = r.String("REQUESTLOG__CONSUMER_GROUP", s.Group)
	return RequestLog{Producer: p, Sink: s}
}
