package requestlogview

// IdempotencyQueries names the idempotency store's queries for the plan
// test (an external test package: testenv imports this one).
func IdempotencyQueries() map[string]string {
	return map[string]string{"read": readKey, "drop": dropExpired, "finish": finishKey, "release": releaseKey, "sweep": sweepExpired}
}
