package protos

import (
	"strings"
	"unicode"
)

// Info is what the proto-file list reports about a file's contents.
type Info struct {
	Package  string
	Messages int // every message declaration, nested ones included
	Services int
}

// Parse reads the package name and counts the message and service
// declarations of a .proto file. It tokenises the file (comments and
// string literals skipped), so a keyword in a comment, an option string or
// a field named "message" is not counted: a declaration is the keyword,
// an identifier and an opening brace.
func Parse(src []byte) Info {
	toks := tokens(string(src))
	var info Info
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "package":
			var b strings.Builder
			j := i + 1
			for ; j < len(toks) && toks[j] != ";"; j++ {
				b.WriteString(toks[j])
			}
			if j < len(toks) && info.Package == "" {
				info.Package = b.String()
			}
			i = j
		case "message", "service":
			if i+2 < len(toks) && isIdent(toks[i+1]) && toks[i+2] == "{" {
				if toks[i] == "message" {
					info.Messages++
				} else {
					info.Services++
				}
			}
		}
	}
	return info
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return s != ""
}

// tokens splits proto source into identifiers (dotted names stay whole)
// and single punctuation characters, dropping comments, strings and space.
func tokens(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '"' || c == '\'':
			i++
			for i < len(s) && s[i] != c {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
			out = append(out, `""`)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || c == '.' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '.' || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		default:
			out = append(out, string(c))
			i++
		}
	}
	return out
}
