package user_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cfgd/cfgd/commands/user"
)

var sources = user.Sources{DashboardHosts: []string{"dashboard.example.com", "localhost"}, RegistrationPaths: []string{"/register/", "/signup"}}

func TestSourceName(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://dashboard.example.com/", "Dashboard"},
		{"https://Dashboard.Example.com:8443/x?utm_source=fb&utm_campaign=y", "Dashboard"},
		{"http://localhost:3000/", "Dashboard"},
		{"https://example.com/?utm_source=facebook&utm_campaign=spring", "Facebook - Spring Campaign"},
		{"https://example.com/landing?utm_campaign=spring_sale&utm_source=google-ads&utm_medium=cpc", "Google Ads - Spring Sale Campaign"},
		{"https://example.com/?utm_source=LinkedIn&utm_campaign=q3", "LinkedIn - Q3 Campaign"},
		{"https://example.com/register/", "Website Registration"},
		{"https://example.com/register", "Website Registration"},
		{"https://example.com/signup/?ref=friend", "Website Registration"},
		{"/register/", "Website Registration"},
		{"https://example.com/register/?utm_source=facebook", "Website Registration"},
		{"https://example.com/?utm_source=facebook", "example.com"},
		{"https://blog.partner.org/post", "blog.partner.org"},
		{"https://WWW.Example.com:8080/", "www.example.com"},
		{"/pricing", "Other"},
		{"/", "Other"},
	}
	for _, tc := range tests {
		checked, err := user.CheckSourceURL(tc.url)
		if err != nil {
			t.Errorf("CheckSourceURL(%q): %v", tc.url, err)
			continue
		}
		if got := sources.Name(checked); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestCheckSourceURLRejects(t *testing.T) {
	for _, bad := range []string{
		"", " ", "javascript:alert(1)", "ftp://example.com/", "//evil.example/x", "https:///path", "mailto:a@b.c",
		"https://exa mple.com/", "relative/path", "https://example.com/\x00", "data:text/html,hi", "http://[::1", strings.Repeat("/a", 1025),
		// Backslashes: browsers read "/\\host" as "//host".
		"/\\evil.example", "/\\/evil.example", "\\\\evil.example", "https://example.com\\@evil.example/", "https://example.com/a\\b",
		// Userinfo disguises the host and carries credentials.
		"https://user:pass@example.com/", "https://user@example.com/", "http://example.com@evil.example/", "https://:@example.com/",
		// Schemes other than http(s), however written.
		"file:///etc/passwd", "ws://example.com/", "vbscript:msgbox(1)", "JaVaScRiPt:alert(1)",
	} {
		if got, err := user.CheckSourceURL(bad); err == nil {
			t.Errorf("CheckSourceURL(%q) accepted as %q", bad, got)
		}
	}
}

func FuzzSourceName(f *testing.F) {
	for _, s := range []string{"https://example.com/?utm_source=a&utm_campaign=b", "/register/", "https://dashboard.example.com", "http://x/%zz", "/?utm_source=\x00&utm_campaign=%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checked, err := user.CheckSourceURL(raw)
		if err != nil {
			return
		}
		name := sources.Name(checked)
		if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > 200 || strings.ContainsAny(name, "\r\n\x00") {
			t.Fatalf("Name(%q) = %q", checked, name)
		}
	})
}
