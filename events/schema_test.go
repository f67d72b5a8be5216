package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events"
)

// renamed is at version 3: v1 had "name", v2 renamed it "title", v3
// added "size" (a default for the older ones).
type renamed struct {
	Title string `json:"title"`
	Size  int    `json:"size"`
}

func (renamed) EventType() string  { return "test.renamed" }
func (renamed) SchemaVersion() int { return 3 }
func (renamed) Upcasters() []events.Upcaster {
	return []events.Upcaster{
		func(d json.RawMessage) (json.RawMessage, error) { // v1 -> v2
			var v1 struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(d, &v1); err != nil {
				return nil, err
			}
			return json.Marshal(map[string]string{"title": v1.Name})
		},
		func(d json.RawMessage) (json.RawMessage, error) { // v2 -> v3
			var v2 map[string]any
			if err := json.Unmarshal(d, &v2); err != nil {
				return nil, err
			}
			v2["size"] = 1
			return json.Marshal(v2)
		},
	}
}

// unupcast claims version 2 without an upcaster.
type unupcast struct{}

func (unupcast) EventType() string  { return "test.unupcast" }
func (unupcast) SchemaVersion() int { return 2 }

func TestUpcastEveryVersion(t *testing.T) {
	reg, err := events.NewRegistry(renamed{})
	if err != nil {
		t.Fatal(err)
	}
	env := func(v int, data string) events.Envelope {
		return events.Envelope{ID: [16]byte{1}, Stream: "s", Version: 1, Type: "test.renamed", Data: json.RawMessage(data), Metadata: events.Metadata{SchemaVersion: v}}
	}
	tests := []struct {
		name string
		env  events.Envelope
		want renamed
		err  string
	}{
		{"stored before versions (0 is 1)", env(0, `{"name":"a"}`), renamed{Title: "a", Size: 1}, ""},
		{"v1", env(1, `{"name":"b"}`), renamed{Title: "b", Size: 1}, ""},
		{"v2", env(2, `{"title":"c"}`), renamed{Title: "c", Size: 1}, ""},
		{"v3", env(3, `{"title":"d","size":7}`), renamed{Title: "d", Size: 7}, ""},
		{"v4 needs a newer build", env(4, `{}`), renamed{}, "waiting for a newer cfgd: test.renamed v4"},
		{"a v1 that is no JSON", env(1, `[`), renamed{}, "upcast test.renamed"},
	}
	for _, tc := range tests {
		ev, err := reg.Decode(tc.env)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || *ev.(*renamed) != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, ev, err, tc.want)
		}
	}
	var newer *events.ErrNewerSchema
	if _, err := reg.Decode(env(4, `{}`)); !errors.As(err, &newer) || newer.Version != 4 {
		t.Errorf("v4: %v, want *ErrNewerSchema", err)
	}
	e, err := events.New("s", renamed{Title: "x"}, events.Metadata{}, time.Unix(1, 0))
	if err != nil || e.Metadata.SchemaVersion != 3 || events.Headers(e)[events.HeaderSchemaVersion] != "3" ||
		events.Headers(e)[events.HeaderSchemaLevel] == "" {
		t.Errorf("New: %+v %v (headers %v)", e.Metadata, err, events.Headers(e))
	}
}

func TestRegisterNeedsAnUpcasterPerOlderVersion(t *testing.T) {
	if _, err := events.NewRegistry(unupcast{}); err == nil || !strings.Contains(err.Error(), "needs one per older version") {
		t.Fatalf("a v2 type without upcasters registered: %v", err)
	}
}

// Check is what a consumer asks of a record before it acts on it (or
// moves past it): only a build that knows the type at that version may.
func TestCheck(t *testing.T) {
	reg, err := events.NewRegistry(renamed{}, sample{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ            string
		version, level int
		want           string // "" ok, "newer", "unknown"
	}{
		{"test.sample", 1, events.SchemaLevel, ""},
		{"test.sample", 1, events.SchemaLevel + 5, ""}, // a type this build knows, at its version
		{"test.sample", 2, events.SchemaLevel + 1, "newer"},
		{"test.renamed", 3, events.SchemaLevel, ""},
		{"test.renamed", 1, 1, ""},
		{"test.brand_new", 1, events.SchemaLevel + 1, "newer"}, // may concern this build: wait
		{"test.brand_new", 1, events.SchemaLevel, "unknown"},   // no build of this level knows it
	}
	for _, tc := range tests {
		err := reg.Check(tc.typ, tc.version, tc.level)
		var newer *events.ErrNewerSchema
		var unknown *events.ErrUnknownType
		got := ""
		switch {
		case errors.As(err, &newer):
			got = "newer"
		case errors.As(err, &unknown):
			got = "unknown"
		case err != nil:
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Check(%s, v%d, level %d) = %v, want %q", tc.typ, tc.version, tc.level, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want int
	}{{"", 1}, {"3", 3}, {"0", 1}, {"-2", 1}, {"x", 1}} {
		if got := events.ParseSchemaHeader(tc.in); got != tc.want {
			t.Errorf("ParseSchemaHeader(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if events.CheckFormat("requestlog.batch", 2, 1) == nil || events.CheckFormat("requestlog.batch", 1, 1) != nil {
		t.Error("CheckFormat")
	}
}
