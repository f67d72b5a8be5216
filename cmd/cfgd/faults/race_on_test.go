//go:build race

package faults

// raceBuild builds the cfgd binary with -race when the tests run with it:
// the subprocess is then checked too, and its packages come from the same
// build cache the rest of a -race suite fills.
const raceBuild = true
