package settings

import (
	"slices"
	"testing"

	"github.com/cfgd/cfgd/deploy/config"
)

func TestFindUnknown(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		dot  map[string]string
		want []Unknown
	}{
		{"transposed letters", map[string]string{"POSTGRES__ULR": "postgres://x/db"}, nil, []Unknown{{"POSTGRES__ULR", "POSTGRES__URL"}}},
		{"missing letter, from .env", nil, map[string]string{"HTTP__ADR": ":1"}, []Unknown{{"HTTP__ADR", "HTTP__ADDR"}}},
		{"lower case", map[string]string{"redis__url": "redis://x"}, nil, []Unknown{{"redis__url", "REDIS__URL"}}},
		{"extension variable", map[string]string{"SUPPORT__SLA_HOUR": "2"}, nil, []Unknown{{"SUPPORT__SLA_HOUR", "SUPPORT__SLA_HOURS"}}},
		{"nothing near", map[string]string{"POSTGRES__REPLICA_POOL_SIZE": "3"}, nil, []Unknown{{"POSTGRES__REPLICA_POOL_SIZE", ""}}},
		{"known names pass", map[string]string{"POSTGRES__URL": "postgres://x/db", "TASKS__QUEUES": "a"}, nil, nil},
		{"other programs' variables pass", map[string]string{"PATH": "/bin", "HOME": "/root", "GOFLAGS": "", "OTHER__THING": "1"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FindUnknown(config.FromMaps(tc.env, tc.dot))
			if !slices.Equal(got, tc.want) {
				t.Errorf("FindUnknown = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"URL", "URL", 0}, {"ULR", "URL", 1}, {"UR", "URL", 1}, {"URLS", "URL", 1}, {"XRL", "URL", 1}, {"", "URL", 3}, {"ABC", "CBA", 2},
	}
	for _, tc := range tests {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestBuiltInURLs(t *testing.T) {
	r := config.NewReader(config.FromMaps(map[string]string{"POSTGRES__URL": "postgres://db/cfgd", "KAFKA__BROKERS": "k:9092"}, nil))
	if got, want := BuiltInURLs(r), []string{"CLICKHOUSE__URL", "REDIS__URL"}; !slices.Equal(got, want) {
		t.Errorf("BuiltInURLs = %v, want %v", got, want)
	}
}
