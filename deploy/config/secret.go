package config

import (
	"fmt"
	"log/slog"
)

// Masked is how a set secret is shown; an unset one shows as "".
const Masked = "****"

// Secret holds a value that must never reach a response, a log line or an
// error. Every way of printing or encoding it gives Masked or "", so a
// settings struct holding secrets is safe to pass to encoding/json, slog or
// fmt as a whole; only Reveal gives the value.
type Secret struct {
	// A struct with an unexported field rather than a string type, so that
	// string(s) does not compile and reflection-based encoders that ignore
	// our methods see nothing.
	value string
}

// NewSecret wraps v.
func NewSecret(v string) Secret { return Secret{value: v} }

// Reveal returns the value, for the code that actually uses it.
func (s Secret) Reveal() string { return s.value }

// IsSet tells whether the secret has a value.
func (s Secret) IsSet() bool { return s.value != "" }

func (s Secret) masked() string {
	if s.value == "" {
		return ""
	}
	return Masked
}

// String masks the value.
func (s Secret) String() string { return s.masked() }

// GoString masks the value under %#v.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.masked()) }

// Format masks the value under every verb; without it a verb that does not
// fit a string (%d) would make fmt print the raw field.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = fmt.Fprint(f, s.GoString())
		return
	}
	if verb == 'q' {
		_, _ = fmt.Fprintf(f, "%q", s.masked())
		return
	}
	_, _ = fmt.Fprint(f, s.masked())
}

// LogValue masks the value in slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.masked()) }

// MarshalText masks the value for text encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.masked()), nil }

// MarshalJSON masks the value: "****" when set, "" when unset.
func (s Secret) MarshalJSON() ([]byte, error) {
	if s.value == "" {
		return []byte(`""`), nil
	}
	return []byte(`"` + Masked + `"`), nil
}

var (
	_ fmt.Stringer   = Secret{}
	_ fmt.Formatter  = Secret{}
	_ fmt.GoStringer = Secret{}
	_ slog.LogValuer = Secret{}
)
