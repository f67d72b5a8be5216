package identity_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
)

func TestNormaliseEmail(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"Ann@Example.COM", "ann@example.com", nil},
		{"  ann@example.com\t", "ann@example.com", nil},
		{"first.last+tag@sub.example.org", "first.last+tag@sub.example.org", nil},
		{"", "", identity.ErrEmailRequired},
		{"   ", "", identity.ErrEmailRequired},
		{"ann", "", identity.ErrInvalidEmail},
		{"ann@", "", identity.ErrInvalidEmail},
		{"@example.com", "", identity.ErrInvalidEmail},
		{"Ann <ann@example.com>", "", identity.ErrInvalidEmail},
		{"<ann@example.com>", "", identity.ErrInvalidEmail},
		{"ann@example.com, bob@example.com", "", identity.ErrInvalidEmail},
		{"ann@example.com\r\nBcc: x@y.z", "", identity.ErrInvalidEmail},
		{"ann @example.com", "", identity.ErrInvalidEmail},
		{"ann@exa mple.com", "", identity.ErrInvalidEmail},
		{`"ann"@example.com`, "", identity.ErrInvalidEmail},
		{"ann@example..com", "", identity.ErrInvalidEmail},
		{"ann@.example.com", "", identity.ErrInvalidEmail},
		{"ann@[127.0.0.1]", "", identity.ErrInvalidEmail},
		{"a@b@example.com", "", identity.ErrInvalidEmail},
		{strings.Repeat("a", 250) + "@x.io", "", identity.ErrInvalidEmail},
	}
	for _, tc := range tests {
		got, err := identity.NormaliseEmail(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("NormaliseEmail(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if identity.ErrEmailRequired.Error() != "Email is required" {
		t.Fatalf("the spec's message: %q", identity.ErrEmailRequired)
	}
}

func FuzzNormaliseEmail(f *testing.F) {
	for _, s := range []string{"ann@example.com", "A@B.C", "", "x <y@z>", "a@b@c", "\x00@x", "é@ü.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := identity.NormaliseEmail(in)
		if err != nil {
			return
		}
		// A normalised address is idempotent, short, single-line and safe
		// to put in a stream name and a mail header.
		again, err := identity.NormaliseEmail(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", in, got, again, err)
		}
		if len(got) > identity.MaxEmailLength || strings.ContainsAny(got, "\r\n <>\",") || strings.Count(got, "@") != 1 {
			t.Fatalf("unsafe address %q from %q", got, in)
		}
	})
}

func TestEveryEventIsRegistrable(t *testing.T) {
	reg, err := events.NewRegistry(identity.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range identity.Events() {
		if seen[e.EventType()] || !reg.Known(e.EventType()) || !strings.Contains(e.EventType(), ".") {
			t.Errorf("event type %q", e.EventType())
		}
		seen[e.EventType()] = true
	}
}
