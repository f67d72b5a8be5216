package user

import (
	"errors"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxSourceURLLength bounds a registration source URL.
const MaxSourceURLLength = 2048

// ErrBadSourceURL rejects a source_url that is neither an http(s) URL nor a
// site path, or that holds a backslash or user credentials.
var ErrBadSourceURL = errors.New("source_url must be an http(s) URL or a path starting with /")

// Sources categorises registration source URLs (docs/api.md, registration-source analytics).
type Sources struct {
	DashboardHosts    []string // host names whose URLs are "Dashboard"
	RegistrationPaths []string // paths that are "Website Registration"
}

// Display names.
const (
	NameDashboard    = "Dashboard"
	NameWebsite      = "Website Registration"
	NameOther        = "Other"
	maxNamePartRunes = 60
)

// CheckSourceURL trims raw and checks it is an absolute http(s) URL with a
// host and no userinfo, or a path on the site, with no backslash anywhere;
// it returns the trimmed URL.
func CheckSourceURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" || len(s) > MaxSourceURLLength || !utf8.ValidString(s) {
		return "", ErrBadSourceURL
	}
	for _, r := range s {
		// Browsers read a backslash in an http(s) URL as a slash, so
		// "/\evil.example" is the protocol-relative "//evil.example" to
		// them while it looks like a path here.
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '\\' {
			return "", ErrBadSourceURL
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.User != nil {
		// user:pass@ is how "https://example.com@evil.example" disguises
		// its host, and a link must never carry credentials.
		return "", ErrBadSourceURL
	}
	switch {
	case u.Scheme == "" && u.Host == "" && strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//"):
		return s, nil
	case (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.Opaque == "":
		return s, nil
	}
	return "", ErrBadSourceURL
}

// Name derives the display name of a checked source URL, in the order of
// The rules of docs/api.md: a dashboard host; utm_source with utm_campaign; a
// registration path; otherwise the host name ("Other" for a bare path).
func (c Sources) Name(checked string) string {
	u, err := url.Parse(checked)
	if err != nil {
		return NameOther
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range c.DashboardHosts {
		if host != "" && strings.EqualFold(host, h) {
			return NameDashboard
		}
	}
	q := u.Query()
	if src, camp := strings.TrimSpace(q.Get("utm_source")), strings.TrimSpace(q.Get("utm_campaign")); src != "" && camp != "" {
		return title(src) + " - " + title(camp) + " Campaign"
	}
	path := u.EscapedPath()
	for _, p := range c.RegistrationPaths {
		if samePath(path, p) {
			return NameWebsite
		}
	}
	if host != "" {
		return host
	}
	return NameOther
}

func samePath(a, b string) bool {
	return a != "" && strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") && strings.TrimSuffix(a, "/") != ""
}

// title turns "spring_sale" into "Spring Sale": separators become spaces
// and each word gets a capital first letter; the rest keeps its case, so
// "LinkedIn" stays as written.
func title(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '_' || r == '-' || r == '+' || r == '.':
			return ' '
		case unicode.IsControl(r):
			return -1
		}
		return r
	}, s)
	words := strings.Fields(s)
	for i, w := range words {
		r, n := utf8.DecodeRuneInString(w)
		words[i] = string(unicode.ToUpper(r)) + w[n:]
	}
	out := strings.Join(words, " ")
	if utf8.RuneCountInString(out) > maxNamePartRunes {
		out = string([]rune(out)[:maxNamePartRunes])
	}
	return out
}
