package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/events/kafka"
	sink "github.com/cfgd/cfgd/projections/requestlog"
)

// chReplayName is the ClickHouse request-log tables' name for cfgd replay.
const chReplayName = sink.ReplayName

// replayClickHouse rebuilds the request-log tables from the request-log
// topic and swaps them in; pool holds the fence the running serve's sink
// shares.
func replayClickHouse(ctx context.Context, pool *pgxpool.Pool, app appSettings, stdout io.Writer) error {
	opts, err := clickhouse.ParseDSN(app.Core.ClickHouseURL)
	if err != nil {
		return fmt.Errorf("CLICKHOUSE__URL: %w", err)
	}
	opts.DialTimeout = 2 * time.Second
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	defer conn.Close()
	cfg := sink.DefaultReplayConfig(clientBus(app.Core))
	cfg.RetentionDays = app.RequestLog.Sink.RetentionDays
	// Records, not events: events are packed many to a record, and how
	// many is known only once read.
	progress, _, finish := newProgress(stdout, chReplayName, "records")
	res, err := sink.Replay(ctx, cfg, conn, pool, progress)
	finish(err)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: interrupted; the live tables are untouched, run the replay again to rebuild: %w", chReplayName, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s: replayed %d records (%d events, %d unreadable skipped) in %s, swapped in\n",
		chReplayName, res.Records, res.Events, res.Poisoned, res.Elapsed.Round(time.Millisecond))
	return nil
}

// clickhouseListLine is the projection's row of `cfgd replay --list`
// (NAME, KIND, TABLES, STREAMS, POSITION, LAG): its position is the live
// sink's committed offsets summed over partitions, its lag the high
// watermarks' sum minus that; "?" when Kafka does not answer.
func clickhouseListLine(ctx context.Context, app appSettings) string {
	c := clientBus(app.Core)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := sink.Status(ctx, c, app.RequestLog.Sink.Group)
	pos, lag := fmt.Sprint(st.Position), fmt.Sprint(st.Lag)
	if err != nil {
		pos, lag = "?", "?"
	}
	return fmt.Sprintf("%s\tclickhouse\t%s\t%s\t-\t%s\t%s", st.Name, c.Topic(kafka.TopicRequestLogs), strings.Join(st.Tables, ","), pos, lag)
}
