package identityview

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// PostgresSchema are the migrations of the tables this package owns
// (users, profiles, registration sources, session revocations), for deploy/migrate.
func PostgresSchema() (fs.FS, error) { return fs.Sub(schemaFS, "schema") }
