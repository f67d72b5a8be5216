package config

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// RedactMask replaces a password that Redact finds.
const RedactMask = "xxxxx"

// Redact masks every password of the URLs and connection strings in s,
// whether s is one value (POSTGRES__URL) or a line that holds some (an
// error of url.Parse, pgx, clickhouse-go or go-redis, which quote the URL
// they could not read). It is the one masking function: every place that
// prints a setting or an error about one goes through it.
//
// The positions it masks:
//   - the password of a URL's user information (scheme://user:pass@host);
//     when the URL does not parse, or an '@' is left after its host (a
//     password holding '/', '?' or a space), everything from the first ':'
//     after "://" (unless a '/' comes first: no user information) to the
//     last '@' of the text is masked: over-masking a broken URL is the
//     price of never printing a part of its password;
//   - the value of every key naming a password (password, sslpassword,
//     pass, pwd, passwd, and any key holding "secret"), in a URL query
//     (up to '&' or '#') or in a keyword/value string such as libpq's
//     (up to a space, or the closing quote of 'a quoted value').
func Redact(s string) string {
	spans := secretSpans(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(RedactMask)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// RedactError returns err with Redact applied to its text and every
// password found in values (the settings err may be about) masked in it as
// well, in each spelling a library may print it: as written, percent-
// decoded, and quoted by %q. Passwords shorter than 3 bytes are only masked
// where Redact finds them, since replacing every "a" of a line would leave
// nothing to read. The result keeps errors.Is of err (a deadline, a
// cancellation) but not errors.As, so the library's own error, which may
// hold the raw URL in a field, is not reachable from it. nil stays nil.
func RedactError(err error, values ...string) error {
	if err == nil {
		return nil
	}
	msg := RedactText(err.Error(), values...)
	return &redactedError{msg: msg, err: err}
}

// RedactText is Redact of s, with every password of values also masked
// wherever it appears in s (see RedactError).
func RedactText(s string, values ...string) string {
	var olds []string
	for _, v := range values {
		for _, sp := range secretSpans(v) {
			p := v[sp[0]:sp[1]]
			olds = append(olds, p)
			if d, err := url.PathUnescape(p); err == nil {
				olds = append(olds, d)
			}
			if d, err := url.QueryUnescape(p); err == nil {
				olds = append(olds, d)
			}
			olds = append(olds, strings.Trim(strconv.Quote(p), `"`))
			if len(p) >= 2 && p[0] == '\'' && p[len(p)-1] == '\'' {
				// A keyword value in quotes, as libpq reads it.
				olds = append(olds, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(p[1:len(p)-1]))
			}
		}
	}
	// Longest first, so a password is masked whole before a shorter
	// spelling of a part of it is looked for.
	slices.SortFunc(olds, func(a, b string) int { return len(b) - len(a) })
	for _, o := range olds {
		if len(o) >= 3 {
			s = strings.ReplaceAll(s, o, RedactMask)
		}
	}
	return Redact(maskEscapeEcho(s))
}

// escapeEcho is how url.Parse quotes the bad escape it met, which may be
// three bytes of a password ("%zz").
const escapeEcho = `invalid URL escape "`

// maskEscapeEcho masks what url.Parse's errors quote of a bad escape.
func maskEscapeEcho(s string) string {
	for off := 0; ; {
		i := strings.Index(s[off:], escapeEcho)
		if i < 0 {
			return s
		}
		start := off + i + len(escapeEcho)
		end := strings.IndexByte(s[start:], '"')
		if end < 0 {
			return s[:start] + RedactMask
		}
		s = s[:start] + RedactMask + s[start+end:]
		off = start + len(RedactMask)
	}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Is answers for the wrapped error without exposing it to errors.As.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// secretSpans returns the sorted, disjoint [start, end) ranges of s that
// hold a password.
func secretSpans(s string) [][2]int {
	var spans [][2]int
	spans = append(spans, userinfoSpans(s)...)
	spans = append(spans, keySpans(s)...)
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp[0] <= last[1] {
			last[1] = max(last[1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// userinfoSpans finds the password of each scheme://user:pass@ in s. Each
// URL's text runs to the end of s: a password may hold "://" itself, and
// a broken URL is over-masked up to the last '@' of s.
func userinfoSpans(s string) [][2]int {
	var spans [][2]int
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return spans
		}
		start := off + i + 3
		off = start
		region := s[start:]
		if sp, ok := exactUserinfo(s[:start-3], region); ok {
			if sp[1] > sp[0] {
				spans = append(spans, [2]int{start + sp[0], start + sp[1]})
			}
			continue
		}
		// A '/' before any ':' ends a host without user information: the
		// '@' is another URL's (an error line quoting an example first).
		at := strings.LastIndexByte(region, '@')
		if at < 0 {
			continue
		}
		colon := strings.IndexByte(region[:at], ':')
		if slash := strings.IndexByte(region, '/'); colon < 0 || slash >= 0 && slash < colon {
			continue
		}
		spans = append(spans, [2]int{start + colon + 1, start + at})
	}
}

// exactUserinfo finds the password of a URL whose first word (up to a
// space) parses and holds no '@' past its user information; ok is false
// when the URL is broken and the caller must over-mask.
func exactUserinfo(before, region string) (span [2]int, ok bool) {
	word := region
	if k := strings.IndexAny(word, " \t\r\n"); k >= 0 {
		word = word[:k]
	}
	scheme := before[strings.LastIndexFunc(before, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	})+1:]
	if _, err := url.Parse(scheme + "://" + word); err != nil || scheme == "" {
		return span, false
	}
	// url.Parse's own split: the authority ends at the first '/', and
	// (query and fragment cut first) its user information at its last '@'.
	authority := word
	if k := strings.IndexAny(authority, "?#"); k >= 0 {
		authority = authority[:k]
	}
	if k := strings.IndexByte(authority, '/'); k >= 0 {
		authority = authority[:k]
	}
	at := strings.LastIndexByte(authority, '@')
	if strings.IndexByte(region[at+1:], '@') >= 0 {
		// An '@' past the host: the password may hold a '/' or a space.
		return span, false
	}
	if at < 0 {
		return span, true
	}
	colon := strings.IndexByte(authority[:at], ':')
	if colon < 0 {
		return span, true
	}
	return [2]int{colon + 1, at}, true
}

// keySpans finds the value of every password-like key=value in s.
func keySpans(s string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			continue
		}
		// The key: the word before '=' (spaces allowed around '=', as
		// libpq allows them).
		k := i
		for k > 0 && s[k-1] == ' ' {
			k--
		}
		ks := k
		for ks > 0 && isKeyByte(s[ks-1]) {
			ks--
		}
		if ks == k || !secretKey(s[ks:k]) {
			continue
		}
		inQuery := ks > 0 && (s[ks-1] == '?' || s[ks-1] == '&')
		v := i + 1
		for v < len(s) && s[v] == ' ' && !inQuery {
			v++
		}
		end := valueEnd(s, v, inQuery)
		if end > v {
			spans = append(spans, [2]int{v, end})
		}
		i = max(end-1, i)
	}
	return spans
}

func isKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '%'
}

// secretKey tells whether a key names a password; percent-encoded keys
// (pass%77ord) are decoded first, as the drivers decode them.
func secretKey(key string) bool {
	if d, err := url.QueryUnescape(key); err == nil {
		key = d
	}
	key = strings.ToLower(key)
	return strings.Contains(key, "pass") || strings.Contains(key, "pwd") || strings.Contains(key, "secret")
}

// valueEnd is where the value starting at v ends: in a URL query at '&'
// or '#', in a keyword/value string at a space, or after the closing
// quote of a quoted value (with backslash escapes), or at the end.
func valueEnd(s string, v int, inQuery bool) int {
	if v < len(s) && s[v] == '\'' && !inQuery {
		for j := v + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s)
	}
	stop := " \t\r\n"
	if inQuery {
		stop = "&# \t\r\n"
	}
	if j := strings.IndexAny(s[v:], stop); j >= 0 {
		return v + j
	}
	return len(s)
}
