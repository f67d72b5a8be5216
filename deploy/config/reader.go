package config

import (
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// Lookuper is what a Reader reads from; *Source is the real one.
type Lookuper interface {
	Lookup(name string) (string, bool)
}

// Reader reads typed values and remembers every problem; Err reports them all.
type Reader struct {
	src  Lookuper
	errs []error
}

// NewReader reads from src.
func NewReader(src Lookuper) *Reader { return &Reader{src: src} }

// Err joins every problem met so far, one per line, or returns nil.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// Fail records a problem found by the caller's own validation.
func (r *Reader) Fail(name, want, got string) { r.Record(Problem(name, want, got)) }

// Record records a problem made with Problem.
func (r *Reader) Record(p *errcode.Error) { r.errs = append(r.errs, p) }

// Problem is a bad or missing variable: name expects want; got is the
// value, empty when the variable is missing or its value is secret, and
// shown with its passwords masked (Redact), whatever the variable. It is
// an errcode field error naming the variable, so settings fail in the
// shape every other input does; its text is "NAME: want, got "value"".
func Problem(name, want, got string) *errcode.Error {
	problem := want
	if got != "" {
		problem = fmt.Sprintf("%s, got %q", want, Redact(got))
	}
	return &errcode.Error{Code: errcode.Invalid, Fields: map[string]string{name: problem}}
}

func (r *Reader) lookup(name string) (string, bool) {
	v, ok := r.src.Lookup(name)
	if !ok {
		return "", false
	}
	v = strings.TrimSpace(v)
	return v, v != ""
}

// Has tells whether name is set to a non-blank value.
func (r *Reader) Has(name string) bool {
	_, ok := r.lookup(name)
	return ok
}

// String returns the value of name, or def when it is unset or blank.
func (r *Reader) String(name, def string) string {
	if v, ok := r.lookup(name); ok {
		return v
	}
	return def
}

// Required returns the value of name and records a problem when it is missing.
func (r *Reader) Required(name, want string) string {
	v, ok := r.lookup(name)
	if !ok {
		r.Fail(name, "required: "+want, "")
	}
	return v
}

// Secret is Required for values that must never be echoed back, not even in
// an error line.
func (r *Reader) Secret(name string, required bool) string {
	v, ok := r.lookup(name)
	if !ok && required {
		r.Fail(name, "required: a secret value", "")
	}
	return v
}

// Int returns an integer value.
func (r *Reader) Int(name string, def int) int {
	return r.IntRange(name, def, minInt, maxInt)
}

const (
	maxInt = int(^uint(0) >> 1)
	minInt = -maxInt - 1
)

// IntRange returns an integer value within [lo, hi].
func (r *Reader) IntRange(name string, def, lo, hi int) int {
	v, ok := r.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	want := "expected an integer"
	if lo != minInt || hi != maxInt {
		want = fmt.Sprintf("expected an integer from %d to %d", lo, hi)
	}
	if err != nil || n < lo || n > hi {
		r.Fail(name, want, v)
		return def
	}
	return n
}

// Bool accepts true/false, 1/0, yes/no, on/off (any case).
func (r *Reader) Bool(name string, def bool) bool {
	v, ok := r.lookup(name)
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true
	case "false", "0", "no", "off":
		return false
	}
	r.Fail(name, "expected true or false", v)
	return def
}

// Duration accepts Go durations such as 15m or 168h; a bare 0 is allowed.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := r.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.Fail(name, "expected a duration such as 15m or 168h", v)
		return def
	}
	return d
}

// PositiveDuration is Duration that must be greater than zero.
func (r *Reader) PositiveDuration(name string, def time.Duration) time.Duration {
	d := r.Duration(name, def)
	if d <= 0 {
		r.Fail(name, "expected a duration greater than zero such as 15m", d.String())
		return def
	}
	return d
}

// List splits a comma-separated value, dropping blanks; unset gives def.
func (r *Reader) List(name string, def []string) []string {
	v, ok := r.lookup(name)
	if !ok {
		return def
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// HostPort returns a host:port value.
func (r *Reader) HostPort(name, def string) string {
	v := r.String(name, def)
	host, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		r.Fail(name, "expected host:port such as 127.0.0.1:8080", v)
		return def
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		r.Fail(name, "expected a port from 0 to 65535", v)
		return def
	}
	_ = host
	return v
}

// URL returns an absolute URL whose scheme is one of schemes.
func (r *Reader) URL(name, def string, schemes ...string) string {
	v := r.String(name, def)
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" {
		r.Fail(name, "expected a URL such as "+schemes[0]+"://host/...", v)
		return def
	}
	for _, s := range schemes {
		if u.Scheme == s {
			return v
		}
	}
	r.Fail(name, "expected a URL with scheme "+strings.Join(schemes, " or "), v)
	return def
}

// Email returns an e-mail address (bare, without a display name).
func (r *Reader) Email(name, def string, required bool) string {
	var v string
	if required {
		v = r.Required(name, "an e-mail address")
	} else {
		v = r.String(name, def)
	}
	if v == "" {
		return v
	}
	if a, err := mail.ParseAddress(v); err != nil || a.Address != v {
		r.Fail(name, "expected an e-mail address such as team@example.com", v)
	}
	return v
}

// OneOf returns a value that must be one of allowed.
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v := r.String(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.Fail(name, "expected one of "+strings.Join(allowed, ", "), v)
	return def
}
