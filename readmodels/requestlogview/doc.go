// Package requestlogview answers the request-log questions of SPEC.md 4.3
// (the latest requests, and overview, services and methods statistics over
// the last N hours) from ClickHouse.
package requestlogview
