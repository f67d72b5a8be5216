package auth

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	tests := []struct {
		remote, xff, want string
	}{
		{"203.0.113.7:5000", "", "203.0.113.7"},
		{"203.0.113.7:5000", "1.2.3.4", "203.0.113.7"}, // untrusted peer: header ignored
		{"10.1.2.3:5000", "198.51.100.9", "198.51.100.9"},
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.9, 10.9.9.9", "198.51.100.9"}, // rightmost untrusted hop
		{"10.1.2.3:5000", "", "10.1.2.3"},
		{"10.1.2.3:5000", "garbage", "10.1.2.3"},
		{"[::1]:5000", "2001:db8::1", "2001:db8::1"},
		{"[::ffff:203.0.113.7]:5000", "", "203.0.113.7"},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := clientIP(r, trusted); got != tc.want {
			t.Errorf("%s / %q: %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}
