package main

import (
	"testing"
	"time"
)

// A revocation's lag counts from the revoke's answer, or from when a serve
// replica stopped meanwhile (its projections' partitions waiting for it)
// was back; a fault of another process does not move it.
func TestRevocationLag(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name     string
		comps    []*component
		accepted time.Duration // after the revoke at t0; 0: none
		want     time.Duration
	}{
		{"no fault", nil, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"none accepted", []*component{{name: "serve-0", spans: [][2]time.Time{{at(-1000), at(2000)}}}}, 0, 0},
		{"seed 641408792: serve-0 paused over the revoke, accepted 1 s after its return",
			[]*component{{name: "serve-0", spans: [][2]time.Time{{at(-10000), at(2143)}}}}, 3137 * time.Millisecond, 994 * time.Millisecond},
		{"a serve fault before the revoke does not count", []*component{{name: "serve-1", spans: [][2]time.Time{{at(-10000), at(-1000)}}}}, 3 * time.Second, 3 * time.Second},
		{"a ClickHouse fault does not count", []*component{{name: "s1r1", spans: [][2]time.Time{{at(-1000), at(2000)}}}}, 3 * time.Second, 3 * time.Second},
		{"a serve still stopped when the call was accepted", []*component{{name: "serve-1", faulted: true, since: at(1000)}}, 3 * time.Second, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := revocationLag(&supervisor{comps: tc.comps}, t0, tc.accepted); got != tc.want {
				t.Errorf("lag %v, want %v", got, tc.want)
			}
		})
	}
}

// A revocation right after Postgres or the broker came back is not judged:
// a projection may wait its longest retry before it moves again (seed
// 79486595: Postgres back 1.5 s before a logout, its access token accepted
// 4.3 s after it).
func TestRevocationExcused(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name  string
		comps []*component
		want  bool
	}{
		{"no fault", nil, false},
		{"Postgres back 1.5 s before", []*component{{name: "postgres", spans: [][2]time.Time{{at(-12000), at(-1554)}}}}, true},
		{"the broker paused after", []*component{{name: "broker", spans: [][2]time.Time{{at(2000), at(3000)}}}}, true},
		{"Postgres back 7 s before", []*component{{name: "postgres", spans: [][2]time.Time{{at(-20000), at(-7000)}}}}, false},
		{"a serve fault is not a dependency's", []*component{{name: "serve-0", spans: [][2]time.Time{{at(-2000), at(2000)}}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := revocationExcused(&supervisor{comps: tc.comps}, t0, 4266*time.Millisecond); got != tc.want {
				t.Errorf("excused %v, want %v", got, tc.want)
			}
		})
	}
}

// Sessions and API keys are judged alike: an excused revocation is only
// counted, any other's lag goes into its own kind's list.
func TestJudge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name                   string
		comps                  []*component
		session                bool
		want                   time.Duration
		sessions, keys, excuse int
	}{
		{"a session, no fault", nil, true, 1500 * time.Millisecond, 1, 0, 0},
		{"a key, no fault", nil, false, 1500 * time.Millisecond, 0, 1, 0},
		{"a key, serve-0 back 1 s after the revoke", []*component{{name: "serve-0", spans: [][2]time.Time{{at(-5000), at(1000)}}}}, false, 500 * time.Millisecond, 0, 1, 0},
		{"a session, Postgres back 1.5 s before", []*component{{name: "postgres", spans: [][2]time.Time{{at(-12000), at(-1500)}}}}, true, 1500 * time.Millisecond, 0, 0, 1},
		{"a key, the broker paused after", []*component{{name: "broker", spans: [][2]time.Time{{at(200), at(300)}}}}, false, 1500 * time.Millisecond, 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ld := &loader{r: &deployment{sup: &supervisor{comps: tc.comps}}, l: newLedger()}
			lags := &ld.l.revokeLags
			if tc.session {
				lags = &ld.l.sessionLags
			}
			if got := ld.judge(t0, 1500*time.Millisecond, lags); got != tc.want {
				t.Errorf("lag %v, want %v", got, tc.want)
			}
			if len(ld.l.sessionLags) != tc.sessions || len(ld.l.revokeLags) != tc.keys || ld.l.excusedLags != tc.excuse {
				t.Errorf("judged %d sessions, %d keys, %d excused; want %d, %d, %d",
					len(ld.l.sessionLags), len(ld.l.revokeLags), ld.l.excusedLags, tc.sessions, tc.keys, tc.excuse)
			}
			if tc.sessions+tc.keys == 1 && append(ld.l.sessionLags, ld.l.revokeLags...)[0] != tc.want {
				t.Errorf("lags %v %v, want %v", ld.l.sessionLags, ld.l.revokeLags, tc.want)
			}
		})
	}
}

// A lag counts over its bound only past it; the worst is reported either way.
func TestWorstOver(t *testing.T) {
	tests := []struct {
		lags  []time.Duration
		worst time.Duration
		over  int
	}{
		{nil, 0, 0},
		{[]time.Duration{time.Second, 2 * time.Second}, 2 * time.Second, 0},
		{[]time.Duration{2001 * time.Millisecond, 0, 5 * time.Second}, 5 * time.Second, 2},
	}
	for _, tc := range tests {
		if worst, over := worstOver(tc.lags, 2*time.Second); worst != tc.worst || over != tc.over {
			t.Errorf("worstOver(%v, 2s) = %v, %d; want %v, %d", tc.lags, worst, over, tc.worst, tc.over)
		}
	}
}
