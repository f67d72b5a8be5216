package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
	"github.com/cfgd/cfgd/projections/replay"
	"github.com/cfgd/cfgd/projections/sinks"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// clickhouseReplayEnv points the commands at a private broker and a
// private ClickHouse database, and returns them.
func clickhouseReplayEnv(t *testing.T) (kafka.Config, driver.Conn) {
	t.Helper()
	c := testenv.Kafka(t, 2)
	t.Setenv("KAFKA__BROKERS", strings.Join(c.Brokers, ","))
	t.Setenv("KAFKA__PARTITIONS", fmt.Sprint(c.Partitions))
	t.Setenv("KAFKA__TOPIC_PREFIX", c.TopicPrefix)
	t.Setenv("KAFKA__SASL_MECHANISM", c.SASL.Mechanism)
	t.Setenv("KAFKA__SASL_USERNAME", c.SASL.User)
	t.Setenv("KAFKA__SASL_PASSWORD", c.SASL.Password)
	opts, conn := testenv.ClickHouseMigrated(t)
	t.Setenv("CLICKHOUSE__URL", fmt.Sprintf("clickhouse://%s/%s", opts.Addr[0], opts.Auth.Database))
	return c, conn
}

func TestReplayClickHouseCommand(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	baseEnv(t, pgURL)
	c, chConn := clickhouseReplayEnv(t)
	ctx := context.Background()

	// Records signed with the key the commands verify them with.
	signer := produceSignedRequestLogs(t, c)

	// The live sink, as serve runs it: its group, behind the fence.
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg := sinks.DefaultRequestLogConfig(c)
	cfg.BatchWait = 50 * time.Millisecond
	cfg.Signer = signer
	s, err := sinks.NewFencedRequestLogs(cfg, chConn, sinks.PostgresFence{Pool: pool}, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() { stop(); <-done }()
	// Caught up: its offsets committed.
	entry := replay.ForClickHouse(replay.DefaultClickHouseConfig(c), chConn, pool, sinks.RequestLogCodec{Signer: signer}, cfg.Group)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := entry.Status(ctx); err == nil && st.Position == 50 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	tests := []struct {
		args   []string
		stdout []string
	}{
		// Position 50: ten events a record, 500 events committed; lag 0.
		{[]string{"replay", "--list"}, []string{"requestlog.clickhouse clickhouse " + c.Topic(kafka.TopicRequestLogs) + " requestlog_raw,requestlog_minute,requestlog_hour,requestlog_day - 50 0\n"}},
		{[]string{"replay", replay.RequestLogName}, []string{"requestlog.clickhouse: 50/50 records (100.0%)", "records/s, ETA",
			"requestlog.clickhouse: replayed 50 records (500 events, 0 unreadable skipped)", "swapped in"}},
		{[]string{"replay", "--all"}, []string{"identity.users: replayed", "requestlog.clickhouse: replayed 50 records"}},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		err := run(ctx, tc.args, &stdout, &stderr)
		ok := err == nil
		// Columns as words: tabwriter pads them.
		var words []string
		for _, line := range strings.Split(stdout.String(), "\n") {
			words = append(words, strings.Join(strings.Fields(line), " "))
		}
		out := strings.Join(words, "\n")
		for _, want := range tc.stdout {
			ok = ok && strings.Contains(out, want)
		}
		if !ok {
			t.Errorf("%q: %v, stderr %q, stdout %q", tc.args, err, stderr.String(), stdout.String())
		}
	}
	var n uint64
	if err := chConn.QueryRow(ctx, "SELECT count() FROM "+requestlogview.RawTable).Scan(&n); err != nil || n != 500 {
		t.Fatalf("rows after two replays: %d, %v", n, err)
	}

	// Retention deletes the first records of a partition: a replay is
	// refused unless --allow-partial, which rebuilds without their rows.
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(c.Topic(kafka.TopicRequestLogs), map[int32]int64{0: 3}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"replay", replay.RequestLogName}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "Kafka's retention has deleted the records of 30 rows") || !strings.Contains(err.Error(), "--allow-partial") {
		t.Fatalf("replay of a truncated topic: %v", err)
	}
	stdout.Reset()
	if err := run(ctx, []string{"replay", "--allow-partial", replay.RequestLogName}, &stdout, &stderr); err != nil ||
		!strings.Contains(stdout.String(), "30 rows whose records Kafka no longer held left out (--allow-partial)") {
		t.Fatalf("replay --allow-partial: %v, stdout %q", err, stdout.String())
	}
	if err := chConn.QueryRow(ctx, "SELECT count() FROM "+requestlogview.RawTable).Scan(&n); err != nil || n != 470 {
		t.Fatalf("rows after a partial replay: %d, %v", n, err)
	}
}

// produceSignedRequestLogs sets EVENTS__SIGNING_KEY for the commands and
// produces 500 request-log events to bus c, 10 a record, signed with that
// key; it returns the signer.
func produceSignedRequestLogs(t *testing.T, c kafka.Config) *events.Signer {
	t.Helper()
	key := strings.Repeat("replay-signing-key-", 2)
	t.Setenv("EVENTS__SIGNING_KEY", key)
	signer, err := events.NewSigner([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	pc := requestlogkafka.DefaultProducerConfig(c)
	pc.PackEvents = 10
	pc.Timeout = 10 * time.Second
	pc.Signer = signer
	prod, err := requestlogkafka.NewProducer(pc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	evs := make([]requestlog.Event, 500)
	for i := range evs {
		evs[i] = requestlog.Event{ServiceName: "svc", MethodName: "M", Status: requestlog.StatusSuccess, CreatedAt: time.Now().UTC()}
	}
	if err := prod.Produce(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return signer
}
