package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/cfgd/cfgd/events"
)

// Events returns one prototype of every identity event, for the registry.
func Events() []events.Event {
	return []events.Event{
		OTPIssued{}, OTPDeliveryFailed{}, OTPAttempted{}, OTPVerified{},
		EmailClaimed{}, UserRegistered{}, SourceLinked{}, LoggedIn{}, ProfileUpdated{}, AvatarChanged{},
		SessionStarted{}, SessionRefreshed{}, SessionRevoked{},
	}
}

// OTPStream is the stream of codes issued to a normalised address.
func OTPStream(email string) string { return "otp-" + email }

// EmailStream is the claim stream of a normalised address.
func EmailStream(email string) string { return "user-email-" + email }

// UserStream is the stream of user id.
func UserStream(id int64) string { return "user-" + strconv.FormatInt(id, 10) }

// SessionStream is the stream of session id.
func SessionStream(id string) string { return "session-" + id }

// ErrEmailRequired is the spec's message for a blank address.
var ErrEmailRequired = errors.New("Email is required")

// ErrInvalidEmail rejects anything that is not one bare address. The two
// errors below wrap it, so errors.Is(err, ErrInvalidEmail) holds for every
// refused address.
var ErrInvalidEmail = errors.New("enter a valid e-mail address")

// ErrHiddenCharacter refuses an address holding a character a reader cannot
// see or that reorders what they see: controls, format characters (zero-width
// space and joiners, soft hyphen, byte-order mark, the bidi embeddings,
// overrides, isolates and marks), space separators other than the ASCII
// space (no-break space, ideographic space...), private-use and unassigned
// code points, variation selectors and other default-ignorable fillers.
var ErrHiddenCharacter = errors.New("must not contain invisible, control or bidirectional-formatting characters")

// ErrMixedScript refuses a local part or domain label that mixes scripts a
// reader cannot tell apart, such as a Cyrillic "а" among Latin letters.
var ErrMixedScript = errors.New("must not mix letters of different scripts (such as Latin with Cyrillic or Greek) in one part")

// MaxEmailLength is the longest address a mail server must accept (RFC 5321).
const MaxEmailLength = 254

// NormaliseEmail trims an address, refuses hidden characters and mixed
// scripts, maps it to its NFKC form, lower-cases it and checks that it is
// one bare address (no display name, no comments). Two spellings a person
// cannot tell apart must name the same account or be refused:
//
//   - NFKC folds compatibility forms, so fullwidth "ａｎｎ＠ｅｘａｍｐｌｅ.ｃｏｍ",
//     ligatures and the like become the plain address they look like.
//   - Hidden characters (see ErrHiddenCharacter) are refused outright rather
//     than stripped: silently dropping a zero-width space would make an
//     address that differs from what the user typed.
//   - Mixed scripts: each label (the whole local part, each domain label)
//     must be written in one script, ignoring the Common and Inherited
//     scripts (digits, punctuation, combining marks), except the mixes
//     Unicode's "Highly Restrictive" level allows (UTS #39 section 5.2):
//     Latin with Han, Hiragana and Katakana; Latin with Han and Bopomofo;
//     Latin with Han and Hangul. So "nоrm@example.com" with a Cyrillic "о"
//     is refused, while an all-Cyrillic "иван@example.com" is a distinct,
//     legitimate address. A label wholly made of Cyrillic or Greek letters
//     that happen to look Latin ("асе") is allowed: telling it apart needs
//     the confusables data, which no maintained Go library ships.
//
// The whole address is lower-cased, not only the domain: every large
// provider treats local parts case-insensitively, and two accounts
// differing only in case would be a support hazard and an impersonation
// risk. Full case folding is not used, because it would move existing
// addresses holding "ß" to another stream.
func NormaliseEmail(raw string) (string, error) {
	if !utf8.ValidString(raw) {
		return "", ErrInvalidEmail
	}
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", ErrEmailRequired
	}
	// NFKC can lengthen a string many times over; bound the work first.
	if len(s) > 4*MaxEmailLength {
		return "", ErrInvalidEmail
	}
	for _, r := range s {
		if hidden(r) {
			return "", fmt.Errorf("%w: %w (found U+%04X)", ErrInvalidEmail, ErrHiddenCharacter, r)
		}
	}
	// NFKC after lower-casing too: a lower-case mapping may leave a string
	// that is not in normal form, and the result must be a fixed point.
	s = norm.NFKC.String(strings.ToLower(norm.NFKC.String(s)))
	if len(s) > MaxEmailLength {
		return "", ErrInvalidEmail
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f || r == '<' || r == '>' || r == '"' || r == '(' || r == ')' || r == ',' || r == ';' || r == '\\' || hidden(r) {
			return "", ErrInvalidEmail
		}
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return "", ErrInvalidEmail
	}
	at := strings.LastIndexByte(s, '@')
	if at < 1 || at == len(s)-1 {
		return "", ErrInvalidEmail
	}
	domain := s[at+1:]
	if strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.Contains(domain, "..") || strings.HasPrefix(domain, "[") {
		return "", ErrInvalidEmail
	}
	for _, label := range append([]string{s[:at]}, strings.Split(domain, ".")...) {
		if !singleScript(label) {
			return "", fmt.Errorf("%w: %w", ErrInvalidEmail, ErrMixedScript)
		}
	}
	return s, nil
}

// hidden tells whether r is invisible, a control, or a bidirectional
// formatting character (see ErrHiddenCharacter).
func hidden(r rune) bool {
	switch {
	case r == ' ':
		return false // shape checks refuse it with their own message
	case r < utf8.RuneSelf:
		return r < 0x20 || r == 0x7f
	case !unicode.IsGraphic(r): // Cc, Cf, Co, Cs, Zl, Zp, unassigned
		return true
	}
	return unicode.In(r, unicode.Zs, unicode.Bidi_Control, unicode.Join_Control,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// highlyRestrictive lists the script mixes UTS #39 "Highly Restrictive"
// allows in one identifier; any single script is allowed as well.
var highlyRestrictive = [][]string{
	{"Latin", "Han", "Hiragana", "Katakana"},
	{"Latin", "Han", "Bopomofo"},
	{"Latin", "Han", "Hangul"},
}

// singleScript tells whether label's scripts, Common and Inherited aside,
// are one script or one of the highlyRestrictive mixes.
func singleScript(label string) bool {
	var seen []string
	for _, r := range label {
		sc := script(r)
		if sc != "" && !slices.Contains(seen, sc) {
			seen = append(seen, sc)
		}
	}
	if len(seen) < 2 {
		return true
	}
	for _, allowed := range highlyRestrictive {
		if !slices.ContainsFunc(seen, func(sc string) bool { return !slices.Contains(allowed, sc) }) {
			return true
		}
	}
	return false
}

// script names the Unicode script of r, or "" for Common and Inherited.
func script(r rune) string {
	if r < utf8.RuneSelf {
		if ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
			return "Latin"
		}
		return ""
	}
	for name, table := range unicode.Scripts {
		if name != "Common" && name != "Inherited" && unicode.Is(table, r) {
			return name
		}
	}
	return ""
}

// Data decodes the payload of env as T. The command handlers' folds decode
// through commands.When instead; Data serves code that reads one event
// whose type it already checked.
func Data[T events.Event](env events.Envelope) (T, error) {
	var v T
	if err := json.Unmarshal(env.Data, &v); err != nil {
		return v, fmt.Errorf("decode %s %s v%d: %w", env.Type, env.Stream, env.Version, err)
	}
	return v, nil
}
