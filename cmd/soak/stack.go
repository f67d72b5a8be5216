package main

import "time"

// The shortened windows: the sink's retention runs every minute with one
// day kept, completed tasks are kept a minute. The idempotency TTL (24 h)
// and its sweep interval (a minute) are constants of
// readmodels/requestlogview, not settings (see sweeps.go).
const (
	retentionEvery = time.Minute
	retentionDays  = 1
)
