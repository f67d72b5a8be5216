// Package clip shortens strings that came from outside cfgd (span names,
// status values, error texts) to a byte budget. Slicing a string at a
// byte count can split a multi-byte character, and the invalid UTF-8 left
// makes a protobuf string field unmarshallable by whoever reads the
// answer (an OTLP exporter fails on partial_success.error_message); every
// such cut goes through here.
package clip

import (
	"strings"
	"unicode/utf8"
)

// To returns s as valid UTF-8 (invalid bytes become U+FFFD) of at most n
// bytes, cut before the character that would pass n.
func To(s string, n int) string {
	if n <= 0 {
		return ""
	}
	// A character across byte n ends by n+3: keeping that much before
	// cleaning leaves the first n bytes as cleaning the whole would,
	// without copying a long string.
	if len(s) > n+utf8.UTFMax-1 {
		s = s[:n+utf8.UTFMax-1]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// Abbrev is To(s, n) followed by "..." when s is longer than n bytes:
// a client's value quoted in a message.
func Abbrev(s string, n int) string {
	if len(s) > n {
		return To(s, n) + "..."
	}
	return To(s, n)
}
