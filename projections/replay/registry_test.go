package replay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/projections/replay"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	model := projections.New("test.model", "t1")
	projections.On(model, func(context.Context, projections.Tx, events.Envelope, *identity.UserRegistered) error { return nil })
	reactor := projections.NewReactor("test.reactor")
	projections.On(reactor, func(context.Context, projections.Tx, events.Envelope, *identity.UserRegistered) error { return nil })
	other := replay.Replayable{Name: "test.clickhouse", Kind: replay.KindClickHouse}

	r, err := replay.NewRegistry(nil, nil, []*projections.Projection{model, reactor}, other)
	if err != nil {
		t.Fatal(err)
	}
	if ps := r.Projections(); len(ps) != 2 || ps[0] != model || ps[1] != reactor {
		t.Fatalf("projections for serve: %v", ps)
	}
	for _, tc := range []struct {
		name, kind string
		target     bool
	}{
		{"test.model", replay.KindReadModel, true},
		{"test.reactor", replay.KindReactor, false},
		{"test.clickhouse", replay.KindClickHouse, false},
	} {
		e, ok := r.Lookup(tc.name)
		if !ok || e.Kind != tc.kind || (e.Target != nil) != tc.target {
			t.Errorf("%s: %+v %v", tc.name, e, ok)
		}
	}
	if _, ok := r.Lookup("nope"); ok {
		t.Error("an unknown name was found")
	}
	if len(r.All()) != 3 {
		t.Errorf("%d entries", len(r.All()))
	}
	if _, err := replay.NewRegistry(nil, nil, []*projections.Projection{model}, replay.Replayable{Name: "test.model"}); err == nil || !strings.Contains(err.Error(), "test.model twice") {
		t.Errorf("a name twice: %v", err)
	}
}
