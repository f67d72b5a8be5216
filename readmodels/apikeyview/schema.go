package apikeyview

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// PostgresSchema are the migrations of the tables this package owns
// (api_keys, and consumer_offsets for the usage counts), for deploy/migrate.
func PostgresSchema() (fs.FS, error) { return fs.Sub(schemaFS, "schema") }
