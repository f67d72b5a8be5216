package authtest

import (
	"testing"

	"github.com/cfgd/cfgd/cmd/settings"
)

func TestRedisURLFollowsTheEnvironment(t *testing.T) {
	tests := []struct{ env, want string }{
		{"", settings.DefaultCore().RedisURL},
		{"redis://127.0.0.1:6390/3", "redis://127.0.0.1:6390/3"},
	}
	for _, tc := range tests {
		t.Setenv("CFGD_TEST_REDIS_URL", tc.env)
		if got := RedisURL(); got != tc.want {
			t.Errorf("CFGD_TEST_REDIS_URL=%q: RedisURL() = %q, want %q", tc.env, got, tc.want)
		}
	}
}
