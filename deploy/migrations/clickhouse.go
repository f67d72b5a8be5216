package migrations

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// UpClickHouse makes sure the database named in dsn exists. Tables come
// with the features that need them, each written to run on ClickHouse 18.16
// (the Debian package) and on current releases.
func UpClickHouse(ctx context.Context, dsn string) error {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("clickhouse dsn: %w", err)
	}
	db := opts.Auth.Database
	if db == "" || db == "default" {
		return nil
	}
	opts.Auth.Database = "default"
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(db)); err != nil {
		return fmt.Errorf("clickhouse: create database %s: %w", db, err)
	}
	return nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}
