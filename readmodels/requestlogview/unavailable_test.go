package requestlogview

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// A shard without a usable replica is a dependency down (503), any other
// ClickHouse error stays what it was.
func TestNoReplicaIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want errcode.Code
	}{
		{&proto.Exception{Code: allReplicasAreStale, Message: "Could not find enough connections to up-to-date replicas"}, errcode.Unavailable},
		{fmt.Errorf("overview: %w", &proto.Exception{Code: allConnectionTriesFailed}), errcode.Unavailable},
		{&proto.Exception{Code: unknownTable, Message: "Table doesn't exist"}, errcode.Internal},
		{errors.New("boom"), errcode.Internal},
	} {
		got := unavailable(tc.err)
		if c := errcode.From(got).Code; c != tc.want {
			t.Errorf("%v: %s, want %s", tc.err, c, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%v: the cause is lost", tc.err)
		}
	}
	if unavailable(nil) != nil {
		t.Error("unavailable(nil) is not nil")
	}
}
