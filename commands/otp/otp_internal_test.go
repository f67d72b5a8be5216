package otp

import (
	"strings"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(minAgo ...int) []time.Time {
		var out []time.Time
		for _, m := range minAgo {
			out = append(out, now.Add(-time.Duration(m)*time.Minute))
		}
		return out
	}
	tests := []struct {
		issued []time.Time
		want   time.Duration
	}{
		{nil, 0},
		{at(5, 1), 0},
		{at(30, 20, 10), 30 * time.Minute},
		{at(90, 59, 30, 10), 1 * time.Minute},
		{at(60, 30, 10), 0}, // exactly an hour old: out of the window
		{at(200, 120, 61), 0},
	}
	for _, tc := range tests {
		if got := (state{issued: tc.issued}).retryAfter(now); got != tc.want {
			t.Errorf("issued %v: retry after %v, want %v", tc.issued, got, tc.want)
		}
	}
}

func TestLive(t *testing.T) {
	now := time.Now()
	base := code{ID: "c", IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(4 * time.Minute)}
	tests := []struct {
		name string
		mut  func(c *code)
		want bool
	}{
		{"fresh", func(*code) {}, true},
		{"two attempts", func(c *code) { c.Attempts = 2 }, true},
		{"three attempts", func(c *code) { c.Attempts = 3 }, false},
		{"used", func(c *code) { c.Used = true }, false},
		{"voided", func(c *code) { c.Voided = true }, false},
		{"expiry instant", func(c *code) { c.ExpiresAt = now }, false},
	}
	for _, tc := range tests {
		c := base
		tc.mut(&c)
		if got := c.live(now); got != tc.want {
			t.Errorf("%s: live=%v", tc.name, got)
		}
	}
	if (*code)(nil).live(now) {
		t.Error("no code is live")
	}
}

func TestCodesAndHMAC(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		c, err := NewCode()
		if err != nil || !WellFormed(c) {
			t.Fatalf("code %q %v", c, err)
		}
		seen[c] = true
	}
	if len(seen) < 1990 {
		t.Fatalf("only %d distinct codes in 2000", len(seen))
	}
	if _, err := NewHasher([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
	h, _ := NewHasher([]byte(strings.Repeat("k", 32)))
	sum := h.Sum("id-1", "a@b.c", "123456")
	if strings.Contains(sum, "123456") || len(sum) != 64 {
		t.Fatalf("hmac %q", sum)
	}
	if !h.Equal(sum, "id-1", "a@b.c", "123456") || h.Equal(sum, "id-2", "a@b.c", "123456") ||
		h.Equal(sum, "id-1", "x@b.c", "123456") || h.Equal(sum, "id-1", "a@b.c", "123457") {
		t.Fatal("HMAC is not bound to code id, address and code")
	}
	for _, bad := range []string{"", "12345", "1234567", "12345a", "١٢٣٤٥٦", " 12345"} {
		if WellFormed(bad) {
			t.Errorf("WellFormed(%q)", bad)
		}
	}
}

func TestTemplates(t *testing.T) {
	tpl, err := ParseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	m, err := tpl.Message("a@example.com", "042917")
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "Your verification code" || !strings.Contains(m.Text, "042917") || !strings.Contains(m.HTML, "042917") ||
		!strings.Contains(m.Text, "5 minutes") || !strings.Contains(m.HTML, "5 minutes") || m.To != "a@example.com" {
		t.Fatalf("%+v", m)
	}
}
