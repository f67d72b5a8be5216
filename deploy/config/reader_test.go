package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

func TestPrecedence(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		dotenv map[string]string
		read   func(r *Reader) any
		want   any
	}{
		{"string default", nil, nil, func(r *Reader) any { return r.String("A__B", "def") }, "def"},
		{"string dotenv", nil, map[string]string{"A__B": "dot"}, func(r *Reader) any { return r.String("A__B", "def") }, "dot"},
		{"string env over dotenv", map[string]string{"A__B": "env"}, map[string]string{"A__B": "dot"}, func(r *Reader) any { return r.String("A__B", "def") }, "env"},
		{"blank env means unset", map[string]string{"A__B": " "}, nil, func(r *Reader) any { return r.String("A__B", "def") }, "def"},
		{"int default", nil, nil, func(r *Reader) any { return r.Int("N", 7) }, 7},
		{"int dotenv", nil, map[string]string{"N": "8"}, func(r *Reader) any { return r.Int("N", 7) }, 8},
		{"int env", map[string]string{"N": "9"}, map[string]string{"N": "8"}, func(r *Reader) any { return r.Int("N", 7) }, 9},
		{"bool default", nil, nil, func(r *Reader) any { return r.Bool("B", true) }, true},
		{"bool dotenv", nil, map[string]string{"B": "false"}, func(r *Reader) any { return r.Bool("B", true) }, false},
		{"bool env", map[string]string{"B": "yes"}, map[string]string{"B": "false"}, func(r *Reader) any { return r.Bool("B", false) }, true},
		{"duration default", nil, nil, func(r *Reader) any { return r.Duration("D", time.Minute) }, time.Minute},
		{"duration dotenv", nil, map[string]string{"D": "2h"}, func(r *Reader) any { return r.Duration("D", time.Minute) }, 2 * time.Hour},
		{"duration env", map[string]string{"D": "3s"}, map[string]string{"D": "2h"}, func(r *Reader) any { return r.Duration("D", time.Minute) }, 3 * time.Second},
		{"list default", nil, nil, func(r *Reader) any { return strings.Join(r.List("L", []string{"x"}), "|") }, "x"},
		{"list dotenv", nil, map[string]string{"L": "a, b,,c"}, func(r *Reader) any { return strings.Join(r.List("L", nil), "|") }, "a|b|c"},
		{"list env", map[string]string{"L": "z"}, map[string]string{"L": "a,b"}, func(r *Reader) any { return strings.Join(r.List("L", nil), "|") }, "z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(FromMaps(tc.env, tc.dotenv))
			if got := tc.read(r); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if err := r.Err(); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		read func(r *Reader)
		want string
	}{
		{"bad int", map[string]string{"N": "x"}, func(r *Reader) { r.Int("N", 1) }, `N: expected an integer, got "x"`},
		{"int out of range", map[string]string{"N": "200"}, func(r *Reader) { r.IntRange("N", 24, 1, 168) }, `N: expected an integer from 1 to 168, got "200"`},
		{"bad bool", map[string]string{"B": "maybe"}, func(r *Reader) { r.Bool("B", true) }, `B: expected true or false, got "maybe"`},
		{"bad duration", map[string]string{"D": "15 minutes"}, func(r *Reader) { r.Duration("D", 0) }, `D: expected a duration such as 15m or 168h, got "15 minutes"`},
		{"missing required", nil, func(r *Reader) { r.Required("R", "a name") }, `R: required: a name`},
		{"bad host port", map[string]string{"HTTP__ADDR": "8080"}, func(r *Reader) { r.HostPort("HTTP__ADDR", "") }, `HTTP__ADDR: expected host:port such as 127.0.0.1:8080, got "8080"`},
		{"bad email", map[string]string{"E": "nobody"}, func(r *Reader) { r.Email("E", "", true) }, `E: expected an e-mail address such as team@example.com, got "nobody"`},
		{"url scheme", map[string]string{"U": "http://x"}, func(r *Reader) { r.URL("U", "", "redis") }, `U: expected a URL with scheme redis, got "http://x"`},
		{"url password redacted", map[string]string{"U": "http://u:hunter2@x"}, func(r *Reader) { r.URL("U", "", "redis") }, `U: expected a URL with scheme redis, got "http://u:xxxxx@x"`},
		{"secret never echoed", nil, func(r *Reader) { r.Secret("S", true) }, `S: required: a secret value`},
		{"one of", map[string]string{"O": "x"}, func(r *Reader) { r.OneOf("O", "a", "a", "b") }, `O: expected one of a, b, got "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(FromMaps(tc.env, nil))
			tc.read(r)
			err := r.Err()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A bad setting is a field error like any other bad input: the variable is
// the field, so tools can name it without parsing the text.
func TestProblemsAreFieldErrors(t *testing.T) {
	r := NewReader(FromMaps(map[string]string{"N": "x", "B": "maybe"}, nil))
	r.Int("N", 1)
	r.Bool("B", true)
	err := r.Err()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ec *errcode.Error
		if !errors.As(e, &ec) || ec.Code != errcode.Invalid {
			t.Fatalf("%v is not an errcode field error", e)
		}
		fields = append(fields, ec.FieldNames()...)
	}
	if strings.Join(fields, ",") != "N,B" {
		t.Fatalf("fields %v, want N then B", fields)
	}
}
