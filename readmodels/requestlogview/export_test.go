package requestlogview

// IdempotencyQueries names the idempotency store's queries for the plan
// test (an external test package: testenv imports this one).
func IdempotencyQueries() map[string]string {
	return map[string]string{"read": readKey, "drop": dropExpired, "finish": finishKey, "release": releaseKey, "sweep": sweepExpired,
		"charge": chargeCaller, "caller": readCaller, "holds": holdsKey}
}

// LegacyOutcome is legacyOutcome, for the test of answers stored before
// outcomes.
var LegacyOutcome = legacyOutcome

// Percentile is percentile, for the external tests that check the
// series against raw SQL.
var Percentile = percentile
