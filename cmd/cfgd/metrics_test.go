package main

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// /metrics can leave the public listener (METRICS__ADDR) and require a
// bearer token (METRICS__TOKEN).
func TestMetricsOnTheirOwnAddressBehindAToken(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	addr := freeAddr(t)
	t.Setenv("METRICS__ADDR", addr)
	t.Setenv("METRICS__TOKEN", "scrape-secret-0123456789")
	r := start(t)

	if code, _ := get(t, r.base+"/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics on the public listener: %d, want 404", code)
	}
	if code, _ := get(t, "http://"+addr+"/metrics"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d, want 401", code)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer scrape-secret-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics with the token: %d", resp.StatusCode)
	}
	if strings.Contains(r.stderr.String(), "scrape-secret") {
		t.Fatal("the metrics token reached the log")
	}
}
