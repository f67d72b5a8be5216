package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"unicode/utf8"

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

// ErrInvalidEmail rejects anything that is not one bare address.
var ErrInvalidEmail = errors.New("enter a valid e-mail address")

// MaxEmailLength is the longest address a mail server must accept (RFC 5321).
const MaxEmailLength = 254

// NormaliseEmail trims and lower-cases an address and checks that it is one
// bare address (no display name, no comments). The whole address is
// lower-cased, not only the domain: every large provider treats local parts
// case-insensitively, and two accounts differing only in case would be a
// support hazard and an impersonation risk.
func NormaliseEmail(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", ErrEmailRequired
	}
	if len(s) > MaxEmailLength || !utf8.ValidString(s) {
		return "", ErrInvalidEmail
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f || r == '<' || r == '>' || r == '"' || r == '(' || r == ')' || r == ',' || r == ';' || r == '\\' {
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
	return strings.ToLower(s), nil
}

// Data decodes the payload of env as T; folds use it after switching on
// env.Type.
func Data[T events.Event](env events.Envelope) (T, error) {
	var v T
	if err := json.Unmarshal(env.Data, &v); err != nil {
		return v, fmt.Errorf("decode %s %s v%d: %w", env.Type, env.Stream, env.Version, err)
	}
	return v, nil
}
