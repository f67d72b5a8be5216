package main

import (
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events/kafka"
)

// Without REPLICA__ID the replica id is made of what is stable per
// replica (host name, HTTP port); with a port chosen at random nothing is,
// and the members stay dynamic rather than fence each other.
func TestReplicaIDDefault(t *testing.T) {
	for _, tc := range []struct {
		name, set, addr string
		want            func(string) bool
	}{
		{"set", "web-1", "127.0.0.1:8080", func(id string) bool { return id == "web-1" }},
		{"host and port", "", "127.0.0.1:8081", func(id string) bool { return strings.HasSuffix(id, "-8081") && kafka.ValidReplica(id) == nil }},
		{"random port", "", "127.0.0.1:0", func(id string) bool { return id == "" }},
	} {
		c := settings.DefaultCore()
		c.ReplicaID, c.HTTPAddr = tc.set, tc.addr
		if got := replicaID(c); !tc.want(got) {
			t.Errorf("%s: replica id %q", tc.name, got)
		}
	}
}
