// Package requestlogview answers the request-log questions of docs/api.md (request-log statistics)
// (the latest requests, and overview, services and methods statistics over
// the last N hours) from ClickHouse. It owns the request-log tables: their
// names, their DDL as templates chosen by server version (schema.go,
// schema/clickhouse/) and the Postgres generation row replays bump.
package requestlogview
