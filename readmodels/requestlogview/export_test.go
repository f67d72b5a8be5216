package requestlogview

// Percentile is percentile, for the external tests that check the
// series against raw SQL.
var Percentile = percentile
