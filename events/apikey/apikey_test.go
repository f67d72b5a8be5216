package apikey_test

import (
	"strings"
	"testing"

	"github.com/cfgd/cfgd/events/apikey"
)

func TestMaskAndHash(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, masked string }{
		{"cfgd_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", "cfgd...DEFG"},
		{"short", "..."},
		{"exactly12chr", "exac...2chr"},
	}
	for _, tc := range tests {
		if got := apikey.Mask(tc.raw); got != tc.masked {
			t.Errorf("Mask(%q) = %q, want %q", tc.raw, got, tc.masked)
		}
	}
	h := apikey.Hash("cfgd_x")
	if len(h) != 64 || h == apikey.Hash("cfgd_y") || strings.Contains(h, "cfgd") {
		t.Fatalf("hash %q", h)
	}
	for _, typ := range apikey.Types() {
		if !apikey.ValidType(typ) {
			t.Errorf("%s is not valid", typ)
		}
	}
	if apikey.ValidType("admin") || apikey.ValidType("") || apikey.Stream(7) != "apikey-7" {
		t.Fatal("type or stream rules")
	}
}
