package sinks

import (
	"context"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/process"
	"github.com/cfgd/cfgd/events/kafka"
)

// Each way the sinks are not ready carries its /readyz reason (the
// reason, not the error's text, is what /readyz shows): starting, the
// tables or the views missing, a ClickHouse profile without
// load_balancing in_order, a recreated topic.
func TestSinkReadinessReasons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bus := kafka.Config{Brokers: []string{"127.0.0.1:1"}, TopicPrefix: "reasons.", Partitions: 1}
	_, conn := testenv.ClickHouse(t) // an empty database: no tables, no views
	s, err := NewRequestLogs(DefaultRequestLogConfig(bus), conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	u, err := NewUsage(DefaultUsageConfig(bus), nil, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	reasonOf := func(err error) process.Reason {
		if err == nil {
			return ""
		}
		return process.ReasonOf(err)
	}
	clusterCfg := DefaultRequestLogConfig(bus)
	clusterCfg.Cluster = "cfgd" // the local server's load_balancing is the default, random
	clusterCfg.Dial = func(context.Context, string) (driver.Conn, error) { return conn, nil }
	clustered, err := NewRequestLogs(clusterCfg, conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	recreatedSink, err := NewRequestLogs(DefaultRequestLogConfig(bus), conn, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	recreatedSink.topicRecreated(ctx, "new-id")
	recreatedUsage, err := NewUsage(DefaultUsageConfig(bus), nil, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	recreatedUsage.topicRecreated(ctx, 0, "new-id")
	for _, tc := range []struct {
		name string
		err  error
		want process.Reason
	}{
		{"request-log sink starting", s.Ready(ctx), process.Starting},
		{"usage consumer starting", u.Ready(ctx), process.Starting},
		{"tables missing", s.checkSchema(ctx), process.TablesMissing},
		{"load_balancing", clustered.checkLoadBalancing(ctx), process.ClickHouseProfile},
		{"request-log topic recreated", recreatedSink.Ready(ctx), process.TopicRecreated},
		{"usage topic recreated", recreatedUsage.Ready(ctx), process.TopicRecreated},
	} {
		if got := reasonOf(tc.err); got != tc.want {
			t.Errorf("%s: reason %q (%v), want %q", tc.name, got, tc.err, tc.want)
		}
	}
	if cmd := process.TablesMissing.Command(); cmd != "cfgd migrate" {
		t.Errorf("tables missing: command %q", cmd)
	}
}
