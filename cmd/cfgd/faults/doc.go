// Package faults holds the fault tests: the real cfgd binary as a
// subprocess, killed with SIGKILL during ingestion and sign-in, and private
// Redis, Postgres, ClickHouse and broker processes stopped under load; what
// was acknowledged must be there exactly once afterwards.
package faults
