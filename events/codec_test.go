package events_test

import (
	"testing"
	"time"

	"github.com/cfgd/cfgd/events"
)

type sample struct {
	Text string `json:"text"`
}

func (sample) EventType() string { return "test.sample" }

func TestRoundTrip(t *testing.T) {
	reg, err := events.NewRegistry(sample{})
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.New("s-1", sample{Text: "hi"}, events.Metadata{CorrelationID: "c"}, time.Unix(10, 0))
	if err != nil {
		t.Fatal(err)
	}
	env.Version, env.Position = 3, 42
	b, err := events.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	back, err := events.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := reg.Decode(back)
	if err != nil {
		t.Fatal(err)
	}
	if ev.(*sample).Text != "hi" || back.Version != 3 || back.Position != 42 || back.Metadata.CorrelationID != "c" {
		t.Fatalf("round trip lost data: %+v", back)
	}
	h := events.Headers(back)
	if h[events.HeaderType] != "test.sample" || h[events.HeaderStream] != "s-1" || h[events.HeaderVersion] != "3" {
		t.Fatalf("headers: %v", h)
	}
}

func TestRegistry(t *testing.T) {
	tests := []struct {
		name    string
		protos  []events.Event
		wantErr bool
	}{
		{"one", []events.Event{sample{}}, false},
		{"value and pointer are the same type", []events.Event{sample{}, &sample{}}, false},
		{"two types one name", []events.Event{sample{}, clash{}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.NewRegistry(tc.protos...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
		})
	}
	reg, _ := events.NewRegistry(sample{})
	if _, err := reg.Decode(events.Envelope{Type: "nope"}); err == nil {
		t.Fatal("unknown type decoded")
	}
}

type clash struct{}

func (clash) EventType() string { return "test.sample" }

// FuzzUnmarshal: a corrupt message body is an error, never a panic.
func FuzzUnmarshal(f *testing.F) {
	env, _ := events.New("s", sample{Text: "x"}, events.Metadata{}, time.Unix(0, 0))
	env.Version = 1
	good, _ := events.Marshal(env)
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Unmarshal(b)
		if err == nil && (e.Stream == "" || e.Type == "" || e.Version < 1) {
			t.Fatalf("accepted an incomplete envelope: %+v", e)
		}
	})
}
