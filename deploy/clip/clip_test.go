package clip_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cfgd/cfgd/deploy/clip"
)

func TestToCutsOnCharacterBoundaries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 32, "short"},
		{"abcdef", 3, "abc"},
		{"ab€", 3, "ab"},   // € is 3 bytes: cut before it
		{"ab€", 5, "ab€"},  // exactly
		{"ab€cd", 4, "ab"}, // inside it
		{"a😀b", 2, "a"},    // 4 bytes
		{"a😀b", 5, "a😀"},
		{"a\xffb", 3, "a"}, // the invalid byte becomes U+FFFD (3 bytes), which does not fit
		{"a\xffb", 5, "a\uFFFDb"},
		{"anything", 0, ""},
		{strings.Repeat("é", 1000), 7, "ééé"},
	}
	for _, tc := range cases {
		got := clip.To(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) || len(got) > tc.n {
			t.Errorf("To(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := clip.Abbrev(strings.Repeat("x", 31)+"€", 32); got != strings.Repeat("x", 31)+"..." {
		t.Errorf("Abbrev = %q", got)
	}
	if got := clip.Abbrev("fits", 32); got != "fits" {
		t.Errorf("Abbrev = %q", got)
	}
}

// Whatever the input, To's answer is valid UTF-8 within the budget and,
// for valid input, a prefix of it.
func FuzzTo(f *testing.F) {
	f.Add("ab€cd", 4)
	f.Add("a\xffb", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 64
		got := clip.To(s, n)
		if !utf8.ValidString(got) || len(got) > max(n, 0) {
			t.Fatalf("To(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !strings.HasPrefix(s, got) {
			t.Fatalf("To(%q, %d) = %q is not a prefix", s, n, got)
		}
	})
}
