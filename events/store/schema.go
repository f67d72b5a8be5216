package store

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// PostgresSchema are the migrations of the tables this package owns
// (the event store, the relay's and the projections' checkpoints), for deploy/migrate.
func PostgresSchema() (fs.FS, error) { return fs.Sub(schemaFS, "schema") }
