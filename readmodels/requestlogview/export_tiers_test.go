package requestlogview

// P95 is the statistics' p95 of a group with total requests, cum requests
// at or under each of DurationBounds, durations lo..hi and desc, the
// durations above the last bound, longest first: what the rollups and the
// raw rows above the last bound together give.
func P95(total uint64, cum []uint64, lo, hi float64, desc []uint32) float64 {
	if rank, ok := tailRank(0.95, total, cum); ok && rank <= uint64(len(desc)) {
		return float64(desc[rank-1])
	}
	return percentile(0.95, total, cum, lo, hi)
}
