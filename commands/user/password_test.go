package user_test

import (
	"strings"
	"testing"

	"github.com/cfgd/cfgd/commands/user"
)

func TestPasswordHash(t *testing.T) {
	h, err := user.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "correct horse") {
		t.Fatalf("hash %q", h)
	}
	h2, _ := user.HashPassword("correct horse")
	if h == h2 {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	tests := []struct {
		hash, pw string
		want     bool
	}{
		{h, "correct horse", true},
		{h, "correct horse ", false},
		{h, "", false},
		{"", "", false},
		{"", "anything", false},
		{"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdA$aGFzaA", "x", false},
		{"$2b$10$abcdefghijklmnopqrstuv", "x", false},
		{"garbage", "x", false},
	}
	for _, tc := range tests {
		if got := user.CheckPassword(tc.hash, tc.pw); got != tc.want {
			t.Errorf("CheckPassword(%.30q, %q) = %v", tc.hash, tc.pw, got)
		}
	}
}
