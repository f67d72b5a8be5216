package auth_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/app/signin"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
)

// BenchmarkOTPFlow measures whole sign-ins through the real HTTP stack:
// POST /api/auth/otp/request/ (the code is e-mailed over SMTP to the
// in-process server), then POST /api/auth/otp/verify/ with that code, which
// creates the user, the profile, the session and the token pair. The relay
// and the identity projections run alongside, as in `cfgd serve`. Each
// flow uses a new address. It reports flows/s and the p50/p99 latency of a
// flow (both requests).
func BenchmarkOTPFlow(b *testing.B) {
	e := authtest.Start(b, authtest.Options{MaxConns: 32, NoPipeline: os.Getenv("CFGD_BENCH_NO_PIPELINE") != "", Config: func(c *signin.Config) {
		c.IPRequests, c.IPVerifications = 1_000_000, 1_000_000
	}})
	client := authtest.HTTPClient()
	var seq atomic.Int64
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	var mu sync.Mutex
	var lat []time.Duration
	post := func(path string, body any) (int, []byte, error) {
		enc, _ := json.Marshal(body)
		resp, err := client.Post(e.URL+path, "application/json", bytes.NewReader(enc))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, err = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes(), err
	}
	flow := func() error {
		email := fmt.Sprintf("bench-%s-%d@example.com", run, seq.Add(1))
		start := time.Now()
		st, body, err := post("/api/auth/otp/request/", map[string]string{"identifier": email, "channel": "email"})
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("request: %d %s %v", st, body, err)
		}
		m, ok := e.Mail.Last(email)
		if !ok {
			return fmt.Errorf("no e-mail for %s", email)
		}
		st, body, err = post("/api/auth/otp/verify/", map[string]string{"identifier": email, "otp_code": m.Code()})
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("verify: %d %s %v", st, body, err)
		}
		d := time.Since(start)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		return nil
	}
	// Warm the connection pools and the projection consumer groups.
	for range 20 {
		if err := flow(); err != nil {
			b.Fatal(err)
		}
	}
	lat = lat[:0]
	// As many clients as pgbench gets next to it (deploy/scripts/bench/otp.sh);
	// 8 by default, pgbench -c 8.
	clients := 8
	if v, err := strconv.Atoi(os.Getenv("CFGD_BENCH_CLIENTS")); err == nil && v > 0 {
		clients = v
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := flow(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "flows/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
