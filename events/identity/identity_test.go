package identity_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/norm"

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

// TestConfusableAddresses: spellings a person cannot tell from
// norm5@example.com either name that same account or are refused with an
// error that says why; none becomes a new, different account.
func TestConfusableAddresses(t *testing.T) {
	const plain = "norm5@example.com"
	tests := []struct {
		name, in string
		want     string // "" when refused
		err      error
	}{
		{"zero-width space", "norm\u200b5@example.com", "", identity.ErrHiddenCharacter},
		{"zero-width joiner", "norm\u200d5@example.com", "", identity.ErrHiddenCharacter},
		{"zero-width non-joiner", "norm\u200c5@example.com", "", identity.ErrHiddenCharacter},
		{"left-to-right mark", "norm5\u200e@example.com", "", identity.ErrHiddenCharacter},
		{"right-to-left mark", "norm5@\u200fexample.com", "", identity.ErrHiddenCharacter},
		{"right-to-left override", "\u202enorm5@example.com", "", identity.ErrHiddenCharacter},
		{"left-to-right embedding", "norm\u202a5@example.com", "", identity.ErrHiddenCharacter},
		{"pop directional formatting", "norm5\u202c@example.com", "", identity.ErrHiddenCharacter},
		{"first strong isolate", "norm\u20685@example.com", "", identity.ErrHiddenCharacter},
		{"pop directional isolate", "norm5@example.com\u2069", "", identity.ErrHiddenCharacter},
		{"arabic letter mark", "norm\u061c5@example.com", "", identity.ErrHiddenCharacter},
		{"byte-order mark", "\ufeffnorm5@example.com", "", identity.ErrHiddenCharacter},
		{"word joiner", "norm\u20605@example.com", "", identity.ErrHiddenCharacter},
		{"soft hyphen", "norm\u00ad5@example.com", "", identity.ErrHiddenCharacter},
		{"hangul filler", "norm\u31645@example.com", "", identity.ErrHiddenCharacter},
		{"variation selector", "norm5\ufe0f@example.com", "", identity.ErrHiddenCharacter},
		{"no-break space inside", "norm\u00a05@example.com", "", identity.ErrHiddenCharacter},
		{"narrow no-break space", "norm5\u202f@example.com", "", identity.ErrHiddenCharacter},
		{"ideographic space inside", "norm5@exa\u3000mple.com", "", identity.ErrHiddenCharacter},
		{"private use", "norm\ue0005@example.com", "", identity.ErrHiddenCharacter},
		{"unassigned", "norm\U000e00005@example.com", "", identity.ErrHiddenCharacter},
		{"tag character", "norm5\U000e0041@example.com", "", identity.ErrHiddenCharacter},
		{"C1 control", "norm\u00855@example.com", "", identity.ErrHiddenCharacter},
		{"NUL", "norm\x005@example.com", "", identity.ErrHiddenCharacter},
		{"cyrillic o", "n\u043erm5@example.com", "", identity.ErrMixedScript},
		{"cyrillic e in the domain", "norm5@\u0435xample.com", "", identity.ErrMixedScript},
		{"greek omicron", "n\u03bfrm5@example.com", "", identity.ErrMixedScript},
		{"cyrillic after a dot", "norm.\u0430nn@example.com", "", identity.ErrMixedScript},
		{"fullwidth letters", "\uff4e\uff4f\uff52\uff4d\uff15@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.\uff43\uff4f\uff4d", plain, nil},
		{"fullwidth at sign", "norm5\uff20example.com", plain, nil},
		{"fullwidth upper case", "\uff2e\uff2f\uff32\uff2d5@example.com", plain, nil},
		{"mathematical bold", "\U0001d427\U0001d428\U0001d42b\U0001d426" + "5@example.com", plain, nil},
		{"circled digit", "norm\u2464@example.com", plain, nil},
		{"no-break space around", "\u00a0norm5@example.com\u00a0", plain, nil},
		{"ideographic space around", "\u3000norm5@example.com", plain, nil},
		{"fullwidth less-than", "\uff1cnorm5@example.com\uff1e", "", identity.ErrInvalidEmail},
		{"small commercial at twice", "norm5\ufe6bx@example.com", "", identity.ErrInvalidEmail},
		{"all cyrillic", "\u0438\u0432\u0430\u043d@example.com", "\u0438\u0432\u0430\u043d@example.com", nil},
		{"all cyrillic domain", "ivan@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444", "ivan@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444", nil},
		{"greek upper case", "\u0391\u0398\u0397\u039d\u0391@example.gr", "\u03b1\u03b8\u03b7\u03bd\u03b1@example.gr", nil},
		{"latin with kana and han", "tanaka\u7530\u4e2d\u30bf\u30ca\u30ab@example.jp", "tanaka\u7530\u4e2d\u30bf\u30ca\u30ab@example.jp", nil},
		{"latin with hangul", "kim\uae40@example.kr", "kim\uae40@example.kr", nil},
		{"cyrillic with han", "\u0438\u4e2d@example.com", "", identity.ErrMixedScript},
		{"accented latin", "Jos\u00e9@example.com", "jos\u00e9@example.com", nil},
		{"decomposed accent", "Jose\u0301@example.com", "jos\u00e9@example.com", nil},
		{"combining mark is inherited", "ivan\u0301@example.com", "iva\u0144@example.com", nil},
	}
	for _, tc := range tests {
		got, err := identity.NormaliseEmail(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: NormaliseEmail(%+q) = %+q, %v; want %+q, %v", tc.name, tc.in, got, err, tc.want, tc.err)
			continue
		}
		if err != nil && !errors.Is(err, identity.ErrInvalidEmail) {
			t.Errorf("%s: %v does not wrap ErrInvalidEmail, which callers answer as a 400", tc.name, err)
		}
	}
}

func TestNormaliseEmailErrorsNameTheProblem(t *testing.T) {
	_, err := identity.NormaliseEmail("norm\u200b5@example.com")
	if err == nil || !strings.Contains(err.Error(), "U+200B") || !strings.Contains(err.Error(), "invisible") {
		t.Fatalf("error %v", err)
	}
	_, err = identity.NormaliseEmail("n\u043erm5@example.com")
	if err == nil || !strings.Contains(err.Error(), "scripts") {
		t.Fatalf("error %v", err)
	}
}

func FuzzNormaliseEmail(f *testing.F) {
	for _, s := range []string{"ann@example.com", "A@B.C", "", "x <y@z>", "a@b@c", "\x00@x", "é@ü.de", "ａ@ｂ.ｃ", "a\u200b@b.c", "\u0430a@b.c", "İ@b.c", "ǅ@b.c", "ﬃ@b.c"} {
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
		if len(got) > identity.MaxEmailLength || strings.ContainsAny(got, "\r\n <>\",") || strings.Count(got, "@") != 1 ||
			!norm.NFKC.IsNormalString(got) || strings.IndexFunc(got, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
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
