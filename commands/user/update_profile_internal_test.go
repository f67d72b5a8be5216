package user

import (
	"errors"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

func TestProfileTextChecks(t *testing.T) {
	str := func(s string) *string { return &s }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		cmd   UpdateProfile
		field string // "" when valid
	}{
		{"plain", UpdateProfile{FirstName: str("Ann")}, ""},
		{"persian with a zero-width non-joiner", UpdateProfile{FirstName: str("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645")}, ""},
		{"right-to-left override", UpdateProfile{FirstName: str("\u202egnp.exe")}, "first_name"},
		{"left-to-right isolate", UpdateProfile{LastName: str("Doe\u2066")}, "last_name"},
		{"right-to-left mark", UpdateProfile{LastName: str("Doe\u200f")}, "last_name"},
		{"control", UpdateProfile{FirstName: str("A\x07nn")}, "first_name"},
		{"bio may hold a mark", UpdateProfile{Bio: str("\u05e9\u05dc\u05d5\u05dd\u200f!")}, ""},
	}
	for _, tc := range tests {
		_, err := validateProfile(tc.cmd, now)
		var ve *errcode.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ve) || ve.Code != errcode.Invalid || ve.Fields[tc.field] == ""):
			t.Errorf("%s: %v, want a %s error", tc.name, err, tc.field)
		}
	}
}
