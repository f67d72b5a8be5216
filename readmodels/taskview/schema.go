package taskview

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// PostgresSchema are the migrations of the tables this package owns
// (task queues, worker commands, task lifecycle and runs), for deploy/migrate.
func PostgresSchema() (fs.FS, error) { return fs.Sub(schemaFS, "schema") }
