// Package identityview answers queries about users, profiles, registration
// sources and session revocations from the read models built by
// projections/projectors. It never reads the event store. It owns those
// tables (schema/) and their write statements (writes.go), which the
// projections call.
package identityview
