// Package buildinfo says which cfgd a binary is: the release its tree
// belongs to (docs/changelog.md) and the commit it was built from. Every
// place that shows the version (cfgd --version, the start-up log line, the
// index at /, the cfgd_build_info metric) reads it here.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Release is the semantic version of the newest release in
// docs/changelog.md (a test keeps the two equal). It changes only when a
// release is cut; builds between two releases carry the last one's number
// and tell themselves apart by their commit.
const Release = "0.1.0"

// Unknown is what a field the toolchain did not stamp says: `go run`, a
// build with -buildvcs=false or outside a git checkout.
const Unknown = "unknown"

// Info is one binary's identity.
type Info struct {
	Version string // Release
	Commit  string // full git revision, or Unknown
	Date    string // the commit's time (RFC 3339), or Unknown
	// Modified: built from a tree with uncommitted changes.
	Modified bool
	Go       string // the Go toolchain that built it
}

// Read is the identity of the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From is the identity debug.ReadBuildInfo's answer describes.
func From(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: Release, Commit: Unknown, Date: Unknown, Go: runtime.Version()}
	if !ok || bi == nil {
		return in
	}
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.time":
			in.Date = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// ShortCommit is the commit's first 12 characters, with "+modified" when
// the tree had uncommitted changes.
func (i Info) ShortCommit() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified && c != Unknown {
		c += "+modified"
	}
	return c
}

// String is the one-line form: "0.1.0 (commit 0123456789ab, 2026-11-29T05:00:00Z)".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (commit ")
	b.WriteString(i.ShortCommit())
	if i.Date != Unknown {
		b.WriteString(", ")
		b.WriteString(i.Date)
	}
	b.WriteString(")")
	return b.String()
}

// LogAttrs are the attributes of a process's start-up log line.
func (i Info) LogAttrs() []any {
	return []any{"version", i.Version, "commit", i.ShortCommit(), "go", i.Go}
}

// Collector is the cfgd_build_info gauge: always 1, its labels say which
// build is running (version, commit, go), so a dashboard sees a
// mixed-version period and when it ended.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "cfgd_build_info",
		Help:        "The running cfgd build: version (docs/changelog.md), commit and Go version; always 1.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.ShortCommit(), "go_version": i.Go},
	})
	g.Set(1)
	return g
}
