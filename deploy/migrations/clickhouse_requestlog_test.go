package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/deploy/migrations"
)

func TestFeaturesFor(t *testing.T) {
	cases := []struct {
		version string
		want    migrations.ClickHouseFeatures
		bad     bool
	}{
		{version: "18.16.1"},
		{version: "19.3.4", want: migrations.ClickHouseFeatures{LowCardinality: true}},
		{version: "19.6.1", want: migrations.ClickHouseFeatures{LowCardinality: true, TTL: true}},
		{version: "19.10.1.5", want: migrations.ClickHouseFeatures{LowCardinality: true, TTL: true, Codecs: true}},
		{version: "24.3.2.23", want: migrations.ClickHouseFeatures{LowCardinality: true, TTL: true, Codecs: true}},
		{version: "", bad: true},
		{version: "x.y", bad: true},
	}
	for _, c := range cases {
		got, err := migrations.FeaturesFor(c.version)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("FeaturesFor(%q) = %+v, %v; want %+v, bad=%v", c.version, got, err, c.want, c.bad)
		}
	}
}

func TestRequestLogDDLFollowsFeatures(t *testing.T) {
	old := strings.Join(migrations.RequestLogDDL(migrations.ClickHouseFeatures{}, 30), "\n")
	for _, modern := range []string{"LowCardinality", "CODEC", "TTL"} {
		if strings.Contains(old, modern) {
			t.Errorf("18.16 schema uses %s", modern)
		}
	}
	all := strings.Join(migrations.RequestLogDDL(migrations.ClickHouseFeatures{LowCardinality: true, Codecs: true, TTL: true}, 9), "\n")
	for _, modern := range []string{"LowCardinality(String)", "CODEC(Delta, LZ4)", "TTL created_at + INTERVAL 9 DAY", "MODIFY TTL bucket + INTERVAL 9 DAY"} {
		if !strings.Contains(all, modern) {
			t.Errorf("modern schema lacks %s", modern)
		}
	}
}

func TestRequestLogSchemaAndRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := testenv.ClickHouse(t)
	for range 2 { // idempotent
		if err := migrations.UpRequestLog(ctx, conn, 30); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	// 18.16 takes inserts only as native data blocks, with the columns named.
	b, err := conn.PrepareBatch(ctx, "INSERT INTO requestlog_raw (id, created_at, service_name, method_name, status, duration_ms)")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{now, now.AddDate(0, 0, -29), now.AddDate(0, 0, -31), now.AddDate(0, 0, -40)} {
		if err := b.Append(uint64(at.Unix()), at, "s", "m", "success", uint32(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	n, err := migrations.DropExpiredRequestLogs(ctx, conn, 30, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 { // two old days in each of four tables
		t.Fatalf("dropped %d partitions, want 8", n)
	}
	for _, table := range []string{"requestlog_raw", "requestlog_minute", "requestlog_hour", "requestlog_day"} {
		var rows uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 2 {
			t.Errorf("%s holds %d rows after retention, want 2", table, rows)
		}
	}
}
