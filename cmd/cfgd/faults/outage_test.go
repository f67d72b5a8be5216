package faults

import (
	"context"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// TestOutage stops one dependency at a time under light steady load
// (request-log ingestion with an API key, OTP sign-ins) and checks that
// /readyz names it as failing, that cfgd is ready again by itself once it
// is back, and that everything acknowledged around the outage is held
// exactly once.
// readyServes bounds how long after /readyz says ready the ingest and
// sign-in endpoints may still refuse a light load.
const readyServes = 5 * time.Second

func TestOutage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		check string // the /readyz check that must fail
		// private starts the stoppable instance and returns the settings
		// that point cfgd at it.
		private func(t testing.TB) (*server, map[string]string)
	}{
		{"redis", func(t testing.TB) (*server, map[string]string) {
			s, url := startRedis(t)
			return s, map[string]string{"REDIS__URL": url}
		}},
		{"postgres", func(t testing.TB) (*server, map[string]string) {
			s, url := startPostgres(t)
			return s, map[string]string{"POSTGRES__URL": url}
		}},
		{"clickhouse", func(t testing.TB) (*server, map[string]string) {
			s, url := startClickHouse(t)
			return s, map[string]string{"CLICKHOUSE__URL": url}
		}},
		{"kafka", startBroker},
	}
	for _, tc := range cases {
		t.Run(tc.check, func(t *testing.T) {
			t.Parallel()
			mail := startMailbox(t)
			env := mail.Env()
			dep, own := tc.private(t)
			for k, v := range own {
				env[k] = v
			}
			if env["POSTGRES__URL"] == "" {
				env["POSTGRES__URL"] = testenv.PostgresURL(t)
			}
			if env["CLICKHOUSE__URL"] == "" {
				env["CLICKHOUSE__URL"] = localClickHouse(t)
			}
			if env["REDIS__URL"] == "" {
				_, env["REDIS__URL"] = startRedis(t)
			}
			c := newCfgd(t, env)
			c.run("migrate")
			key, keyID := c.apiKey("outage@example.com")
			c.start()
			c.waitReady(60 * time.Second)

			in := newIngester(c, key, keyID, 50, 100*time.Millisecond)
			s := newSigner(c, mail)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			waitIn := in.run(ctx, "o", 2)
			waitS := s.run(ctx, "o", 2, 100*time.Millisecond)
			in.waitAcked(t, 5, 30*time.Second)
			s.waitSigned(t, 3, 30*time.Second)

			stopAt := time.Now()
			dep.stop()
			stopTook := time.Since(stopAt)
			down := c.waitReadiness(tc.check+" reported down", 30*time.Second, func(r readiness) bool {
				ok, named := r.Checks[tc.check]
				return !r.Ready && named && !ok
			})
			// Load keeps coming while it is down, long enough for every
			// client of it to have failed and backed off.
			time.Sleep(3 * time.Second)
			startAt := time.Now()
			dep.start()
			up := c.waitReady(60 * time.Second)
			t.Logf("%s: stopped in %v, reported not ready %v later; started in %v, cfgd ready %v later", tc.check,
				stopTook.Round(time.Millisecond), down.Round(time.Millisecond), time.Since(startAt).Round(time.Millisecond)-up.Round(time.Millisecond), up.Round(time.Millisecond))
			// Traffic is served again, not only /readyz.
			_, _, calls := in.counts()
			signed := s.count()
			tIn := in.waitAcked(t, calls+5, 60*time.Second)
			tS := s.waitSigned(t, signed+3, 60*time.Second)
			t.Logf("%s: once ready, 5 more ingest batches took %v, 3 more sign-ins %v", tc.check, tIn.Round(time.Millisecond), tS.Round(time.Millisecond))
			// Ready means serving: an edge still refusing for seconds after
			// /readyz said ready (sarama's 10 s circuit breaker did that to
			// ingestion after a broker outage) is a readiness that lies.
			if tIn > readyServes || tS > readyServes {
				t.Errorf("%s: /readyz said ready, but ingestion took %v and sign-ins %v to work again (bound %v)", tc.check, tIn, tS, readyServes)
			}
			cancel()
			waitIn()
			waitS()
			_, _, calls = in.counts()
			in.checkIngested(t, openClickHouse(t, env["CLICKHOUSE__URL"]), openPostgres(t, env["POSTGRES__URL"]), 60*time.Second, calls)
			s.checkUsers(t, openPostgres(t, env["POSTGRES__URL"]), 45*time.Second)
		})
	}
}
