package config

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Nothing to mask.
		{"postgres:///cfgd?host=/var/run/postgresql&user=postgres", "postgres:///cfgd?host=/var/run/postgresql&user=postgres"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"clickhouse://cfgd@clickhouse-1:9000/cfgd", "clickhouse://cfgd@clickhouse-1:9000/cfgd"},
		{"15m", "15m"},
		{"https://example.com/reset?next=/a", "https://example.com/reset?next=/a"},
		// User information.
		{"postgres://cfgd:SECRET@postgres:5432/cfgd?sslmode=disable", "postgres://cfgd:xxxxx@postgres:5432/cfgd?sslmode=disable"},
		{"redis://:SECRET@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"rediss://default:SECRET@redis:6380", "rediss://default:xxxxx@redis:6380"},
		{"clickhouse://cfgd:S%40CRET@ch:9000/cfgd", "clickhouse://cfgd:xxxxx@ch:9000/cfgd"},
		{"postgres://u:p@ss@host/db", "postgres://u:xxxxx@host/db"},
		// Broken URLs: over-masked, never partly shown.
		{"postgres://u:SECRET@127.0.0.1:notaport/db", "postgres://u:xxxxx@127.0.0.1:notaport/db"},
		{"postgres://u:SE/CRET@host/db", "postgres://u:xxxxx@host/db"},
		{"postgres://u:12/SECRET@host/db", "postgres://u:xxxxx@host/db"},
		{"postgres://u:SE CRET@host/db", "postgres://u:xxxxx@host/db"},
		{"postgres://u:SE?CRET@host/db", "postgres://u:xxxxx@host/db"},
		{"postgres://u:SE#CRET@host/db", "postgres://u:xxxxx@host/db"},
		// Query and keyword forms.
		{"postgres://u@host/db?password=SECRET&sslmode=disable", "postgres://u@host/db?password=xxxxx&sslmode=disable"},
		{"postgres://host/db?sslmode=require&sslpassword=SECRET", "postgres://host/db?sslmode=require&sslpassword=xxxxx"},
		{"clickhouse://host:9000/db?username=u&password=SECRET#x", "clickhouse://host:9000/db?username=u&password=xxxxx#x"},
		{"mysql://h/db?pwd=SECRET", "mysql://h/db?pwd=xxxxx"},
		{"redis://h/0?pass=SECRET", "redis://h/0?pass=xxxxx"},
		{"host=h user=u password=SECRET dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password = SECRET dbname=d", "host=h password = xxxxx dbname=d"},
		{"host=h password='SE CRET \\' x' dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h PASSWORD=SE&CRET", "host=h PASSWORD=xxxxx"},
		{"postgres://h/db?pass%77ord=SECRET", "postgres://h/db?pass%77ord=xxxxx"},
		// Lines that quote URLs (errors).
		{`parse "postgres://u:SECRET@127.0.0.1:notaport/db": invalid port ":notaport" after host`,
			`parse "postgres://u:xxxxx@127.0.0.1:notaport/db": invalid port ":notaport" after host`},
		{`a "postgres://u:SECRET@h/db" and "redis://:SECRET2@r:1/0" both`, `a "postgres://u:xxxxx@r:1/0" both`}, // an '@' past the host: over-masked
		{`a "postgres://h/db" and "redis://:SECRET2@r:1/0" both`, `a "postgres://h/db" and "redis://:xxxxx@r:1/0" both`},
		// Masking twice changes nothing (cfgd's last guard runs over lines
		// masked where they were made).
		{`POSTGRES__URL: expected a URL such as postgres://host/..., got "postgres://u:xxxxx@127.0.0.1:notaport/db"`,
			`POSTGRES__URL: expected a URL such as postgres://host/..., got "postgres://u:xxxxx@127.0.0.1:notaport/db"`},
		{"redis://://SECRET@r:port/0", "redis://:xxxxx@r:port/0"},
		{"redis://:a://SECRET@r:port/0", "redis://:xxxxx@r:port/0"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// parsers are the libraries that read cfgd's connection settings; each
// may put the value it could not read in its error.
var parsers = map[string]func(string) error{
	"url.Parse":  func(s string) error { _, err := url.Parse(s); return err },
	"pgx":        func(s string) error { _, err := pgxpool.ParseConfig(s); return err },
	"clickhouse": func(s string) error { _, err := clickhouse.ParseDSN(s); return err },
	"go-redis":   func(s string) error { _, err := redis.ParseURL(s); return err },
	"asynq":      func(s string) error { _, err := asynq.ParseRedisURI(s); return err },
}

// Every parser's error about a URL holding a password, passed through
// RedactError with the value, shows no part of the password; without it
// some do (url.Parse quotes the whole URL).
func TestRedactErrorOfEveryParser(t *testing.T) {
	const secret = "SECRETpw"
	values := []string{
		"postgres://u:" + secret + "@127.0.0.1:notaport/db",
		"postgres://u:" + secret + "@host/db?sslmode=bogus",
		"postgres://u@host/db?password=" + secret + "&connect_timeout=x",
		"host=h password=" + secret + " port=notaport",
		"host=h password='" + secret + " x' port=notaport",
		"clickhouse://u:" + secret + "@h:9000/db?dial_timeout=bogus",
		"clickhouse://h:9000/db?password=" + secret + "&compress=bogus",
		"clickhouse://u:" + secret + "@h:notaport/db",
		"redis://:" + secret + "@h:6379/notadb",
		"redis://u:" + secret + "@h:notaport/0",
		"rediss://u:" + secret + "@h:6379/0?dial_timeout=bogus",
		"redis://u:" + secret + "@h:6379/0?pool_size=%zz",
		"postgres://u:" + secret + "%zz@h/db",
		"redis://u:" + secret + " x@h/0",
		"postgres://u:" + secret + "\x7f@h/db",
		"tcp://u:" + secret + "@h:9000?password=" + secret + "&x=%",
	}
	leakedBefore := 0
	for _, v := range values {
		if strings.Contains(Redact(v), secret) {
			t.Errorf("Redact(%q) = %q", v, Redact(v))
		}
		for name, parse := range parsers {
			err := parse(v)
			if err == nil {
				continue
			}
			if strings.Contains(err.Error(), secret) {
				leakedBefore++
			}
			red := RedactError(fmt.Errorf("POSTGRES__URL: %w", err), v)
			if strings.Contains(red.Error(), secret) {
				t.Errorf("%s(%q): %s", name, v, red)
			}
		}
	}
	if leakedBefore == 0 {
		t.Error("no parser error held the password: the test no longer tries what it should")
	}
}

func TestRedactErrorKeepsIsNotAs(t *testing.T) {
	inner := fmt.Errorf("dial: %w", context.DeadlineExceeded)
	_, uerr := url.Parse("postgres://u:SECRETpw@h:x/db")
	err := RedactError(errors.Join(inner, uerr), "postgres://u:SECRETpw@h:x/db")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is lost the deadline")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		t.Error("errors.As reaches the *url.Error, whose URL field holds the password")
	}
	if RedactError(nil) != nil {
		t.Error("RedactError(nil) != nil")
	}
}

// FuzzRedact puts a password in each place a connection setting may hold
// one, written as a user would write it there, and checks that neither
// Redact of the value nor RedactError of any parser's error about it
// shows the password.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"SECRET", "p@ss/w?rd#1", "a b'c\\d", "%zz", "x:y@z", "\"quoted\"", "ümlaut", "pass=word&"} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, pw string, form uint8) {
		if len(pw) < 4 || strings.ContainsAny(pw, "\x00") {
			t.Skip()
		}
		var enc, before, after string // v is before + enc + after
		switch form % 8 {
		case 0: // userinfo, escaped as url.UserPassword does
			before, enc, after = "postgres://u:", strings.TrimPrefix(url.UserPassword("u", pw).String(), "u:"), "@h:5432/db?sslmode=disable"
		case 1: // userinfo as typed, unescaped
			before, enc, after = "postgres://u:", pw, "@h:5432/db"
		case 2: // query, escaped
			before, enc, after = "clickhouse://h:9000/db?username=u&password=", url.QueryEscape(pw), "&secure=false"
		case 3: // keyword/value, quoted as libpq wants
			before, enc, after = "host=h user=u password=", "'"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)+"'", " dbname=d"
		case 4: // keyword/value without quotes: one word
			if strings.ContainsAny(pw, " \t\r\n'") {
				t.Skip()
			}
			before, enc, after = "host=h password=", pw, " dbname=d"
		case 5: // redis, empty user
			before, enc, after = "redis://:", strings.TrimPrefix(url.UserPassword("", pw).String(), ":"), "@r:6379/0"
		case 6: // redis, typed, bad port
			before, enc, after = "redis://:", pw, "@r:port/0"
		case 7: // query, as typed
			if strings.ContainsAny(pw, "&# \t\r\n") {
				t.Skip()
			}
			before, enc, after = "postgres://h/db?password=", pw, ""
		}
		v := before + enc + after
		// A password that is also part of the rest of the value (or of the
		// mask) cannot be told apart from it.
		if strings.Contains(before+"\x00"+RedactMask+"\x00"+after, pw) {
			t.Skip()
		}
		if got := Redact(v); strings.Contains(got, pw) {
			t.Fatalf("Redact(%q) = %q", v, got)
		}
		for name, parse := range parsers {
			err := parse(v)
			if err == nil {
				continue
			}
			msg := strings.ReplaceAll(err.Error(), pw, "")
			if strings.Contains(msg, pw) {
				continue
			}
			if got := RedactError(err, v).Error(); strings.Contains(got, pw) {
				t.Fatalf("%s(%q): %s", name, v, got)
			}
		}
	})
}
