// Package identityview answers queries about users, profiles, registration
// sources and session revocations from the read models built by
// projections/projectors. It never reads the event store.
package identityview
