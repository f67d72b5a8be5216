# Sourced by the benchmark scripts: where Postgres is, and scratch databases
# that are dropped when the script exits (call drop_scratch from its trap).
PGHOST="${PGHOST:-/var/run/postgresql}"
PGUSER="${PGUSER:-postgres}"
SCRATCH_DBS=()

psql_admin() { psql -h "$PGHOST" -U "$PGUSER" -d postgres -qAtc "$1" >/dev/null; }

drop_scratch() {
	local db
	for db in "${SCRATCH_DBS[@]}"; do psql_admin "DROP DATABASE IF EXISTS $db" || true; done
}

# scratch_db NAME creates an empty database NAME.
scratch_db() {
	psql_admin "CREATE DATABASE $1"
	SCRATCH_DBS+=("$1")
}

# pgbench_db NAME creates database NAME initialised by pgbench -i.
pgbench_db() {
	echo "pgbench: initialising scratch database $1" >&2
	scratch_db "$1"
	pgbench -h "$PGHOST" -U "$PGUSER" -i -q "$1" >/dev/null 2>&1
}
