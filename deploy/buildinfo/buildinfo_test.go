package buildinfo_test

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/deploy/buildinfo"
)

// TestReleaseIsTheChangelogs: the version a build says is the newest
// release docs/changelog.md records, so cutting a release is one edit of
// each, checked here.
func TestReleaseIsTheChangelogs(t *testing.T) {
	b, err := os.ReadFile("../../docs/changelog.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+) — \d{4}-\d{2}-\d{2}$`)
	m := heading.FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/changelog.md has no release heading such as '## 0.1.0 — 2026-11-29'")
	}
	if string(m[1]) != buildinfo.Release {
		t.Errorf("buildinfo.Release is %s, the newest release in docs/changelog.md is %s", buildinfo.Release, m[1])
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(buildinfo.Release) {
		t.Errorf("Release %q is not a semantic version", buildinfo.Release)
	}
}

func TestFrom(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-29T05:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"stamped", stamped, true, buildinfo.Release + " (commit 0123456789ab+modified, 2026-11-29T05:00:00Z)"},
		{"go run or -buildvcs=false", &debug.BuildInfo{GoVersion: "go1.26.8"}, true, buildinfo.Release + " (commit unknown)"},
		{"no build information", nil, false, buildinfo.Release + " (commit unknown)"},
	}
	for _, tc := range tests {
		if got := buildinfo.From(tc.bi, tc.ok).String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	in := buildinfo.Info{Version: "1.2.3", Commit: "abc", Date: buildinfo.Unknown, Go: "go1.26.8"}
	reg := prometheus.NewRegistry()
	reg.MustRegister(in.Collector())
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "cfgd_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v", mfs, err)
	}
	m := mfs[0].GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "1.2.3", "commit": "abc", "go_version": "go1.26.8"}
	if m.GetGauge().GetValue() != 1 || len(labels) != len(want) {
		t.Fatalf("cfgd_build_info %v", m)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
}
