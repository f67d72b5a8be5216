package main

import (
	"runtime/debug"
	"testing"

	"github.com/cfgd/cfgd/cmd/settings"
)

// TestMemoryLimit: serve's soft memory limit is SERVE__MEMORY_LIMIT_MB,
// unless GOMEMLIMIT (read by the runtime itself) set one or the setting
// is 0. Without it a serve at its max ingest rate grew past 300 MB
// resident, twice its live heap (docs/benchmarks.md, "Issue 31 point 4").
func TestMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		limit      int64
		gomemlimit string
		want       int64
	}{
		{"the setting", 240 * mib, "", 240 * mib},
		{"another value", 512 * mib, "", 512 * mib},
		{"GOMEMLIMIT wins", 240 * mib, "1GiB", 77 * mib},
		{"0: none set", 0, "", 77 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(77 * mib) // what the runtime had (GOMEMLIMIT, or none)
			env := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlimit
				}
				return ""
			}
			if got := memoryLimit(tc.limit, env); got != tc.want {
				t.Fatalf("memoryLimit(%d, GOMEMLIMIT=%q) = %d, want %d", tc.limit, tc.gomemlimit, got, tc.want)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Fatalf("limit in force %d, want %d", got, tc.want)
			}
		})
	}
}

// TestDefaultMemoryLimit: serve has a limit by default, below the 300 MB
// a serve must stay under at its max ingest rate (issue 31) with room for
// what the runtime does not count (the binary's text, thread stacks).
func TestDefaultMemoryLimit(t *testing.T) {
	if got := settings.DefaultCore().MemoryLimit; got <= 0 || got > 256<<20 {
		t.Fatalf("default SERVE__MEMORY_LIMIT_MB = %d bytes, want 1..256 MiB", got)
	}
}
