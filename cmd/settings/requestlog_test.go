package settings

import (
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/config"
)

func TestReadRequestLog(t *testing.T) {
	r := config.NewReader(config.FromMaps(nil, nil))
	s := ReadRequestLog(r)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if s.Sink.RetentionDays != 30 || s.Sink.BatchRows != 50_000 || s.Sink.BatchWait != 500*time.Millisecond ||
		s.Producer.PackEvents != 512 || s.Producer.Timeout != time.Second || s.Producer.MaxInFlightBytes != 64<<20 {
		t.Fatalf("defaults: %+v", s)
	}
	r = config.NewReader(config.FromMaps(map[string]string{"CLICKHOUSE__RETENTION_DAYS": "7", "REQUESTLOG__BATCH_WAIT": "250ms"}, nil))
	if s = ReadRequestLog(r); r.Err() != nil || s.Sink.RetentionDays != 7 || s.Sink.BatchWait != 250*time.Millisecond {
		t.Fatalf("set: %+v, %v", s, r.Err())
	}
	for name, bad := range map[string]string{
		"CLICKHOUSE__RETENTION_DAYS": "0", "REQUESTLOG__BATCH_ROWS": "2000000", "REQUESTLOG__PACK_EVENTS": "5000",
		"REQUESTLOG__BATCH_WAIT": "-1s", "REQUESTLOG__PRODUCE_TIMEOUT": "soon",
	} {
		r := config.NewReader(config.FromMaps(map[string]string{name: bad}, nil))
		ReadRequestLog(r)
		if err := r.Err(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v", name, bad, err)
		}
	}
}
