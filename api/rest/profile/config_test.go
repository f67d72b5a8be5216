package profile_test

import (
	"strings"
	"testing"

	"github.com/cfgd/cfgd/api/rest/profile"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		max int64
		ok  bool
	}{
		{profile.DefaultAvatarMaxBytes, true},
		{1, true},
		{32 << 20, true},
		{0, false},
		{-1, false},
		{32<<20 + 1, false},
	}
	for _, tc := range tests {
		err := profile.Config{AvatarMaxBytes: tc.max}.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "AvatarMaxBytes")) {
			t.Errorf("%d: %v", tc.max, err)
		}
	}
	if profile.DefaultConfig().AvatarMaxBytes != 2<<20 {
		t.Error("default is not 2 MiB")
	}
}
