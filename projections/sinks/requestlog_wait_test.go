package sinks

import "testing"

// A replica is waited for only for the parts logged by the time the wait
// began (chaos finding 9): parts written later are another sink's.
func TestReplicaQueueBehindTheMark(t *testing.T) {
	mark := replicaQueue{logPointer: 41, logMaxIndex: 40, now: 1000}
	for _, c := range []struct {
		name string
		now  replicaQueue
		want bool
	}{
		{"caught up", replicaQueue{logPointer: 41, logMaxIndex: 40, now: 1001}, false},
		{"a part logged before the mark to fetch", replicaQueue{inserts: 1, oldest: 999, logPointer: 41, logMaxIndex: 40}, true},
		{"a part logged in the mark's second to fetch", replicaQueue{inserts: 1, oldest: 1000, logPointer: 41, logMaxIndex: 40}, true},
		{"only parts logged after the mark to fetch", replicaQueue{inserts: 3, oldest: 1001, logPointer: 44, logMaxIndex: 43}, false},
		{"log entries before the mark not copied yet", replicaQueue{logPointer: 39, logMaxIndex: 45}, true},
		{"the mark's last entry not copied yet", replicaQueue{logPointer: 40, logMaxIndex: 45}, true},
		{"copied past the mark, later entries not yet", replicaQueue{logPointer: 41, logMaxIndex: 45}, false},
		{"an empty log", replicaQueue{logPointer: 0, logMaxIndex: 0}, false},
	} {
		if got := c.now.behind(mark); got != c.want {
			t.Errorf("%s: behind = %v, want %v", c.name, got, c.want)
		}
	}
}
