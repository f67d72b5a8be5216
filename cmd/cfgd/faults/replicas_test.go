package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
)

// otpUses runs OTP sign-ins across replicas: the code is requested on one
// replica and used on the next, then tried again on every replica, where
// it must be refused. It records the sign-ins in s (for checkUsers).
type otpUses struct {
	replicas []*cfgd
	s        *signer

	mu         sync.Mutex
	firstUse   []string // a fresh code refused with a 4xx: the replicas disagree
	reused     []string // a used code accepted again
	reuseTries int
}

func (o *otpUses) run(ctx context.Context, workers int, pause time.Duration) (wait func()) {
	return load(ctx, workers, pause, func(ctx context.Context, w, seq int) bool {
		return o.signIn(ctx, w+seq, fmt.Sprintf("r-%d-%d@example.com", w, seq))
	})
}

func (o *otpUses) signIn(ctx context.Context, n int, email string) bool {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	asker, user := o.replicas[n%len(o.replicas)], o.replicas[(n+1)%len(o.replicas)]
	code, err := asker.post(ctx, "/api/auth/otp/request/", map[string]string{"identifier": email}, nil, nil)
	if err != nil || code != http.StatusOK {
		return false
	}
	otp, err := o.s.mail.Code(ctx, email)
	if err != nil {
		return false
	}
	body := map[string]string{"identifier": email, "otp_code": otp}
	var res struct {
		Tokens struct {
			Access string `json:"access"`
		} `json:"tokens"`
		User struct {
			ID int64 `json:"id"`
		} `json:"user"`
	}
	code, err = user.post(ctx, "/api/auth/otp/verify/", body, nil, &res)
	if err != nil || code >= 500 {
		// Cut off: whether the code was used is unknown.
		return false
	}
	if code != http.StatusOK || res.Tokens.Access == "" {
		o.mu.Lock()
		o.firstUse = append(o.firstUse, fmt.Sprintf("%s: %d", email, code))
		o.mu.Unlock()
		return false
	}
	o.s.mu.Lock()
	o.s.signed[email] = signedIn{userID: res.User.ID, access: res.Tokens.Access}
	o.s.mu.Unlock()
	// Used once: every replica must refuse it now, the one that took it
	// included.
	for i, r := range o.replicas {
		code, err := r.post(ctx, "/api/auth/otp/verify/", body, nil, nil)
		if err != nil || code >= 500 {
			continue // that replica is down just now
		}
		o.mu.Lock()
		o.reuseTries++
		if code < 300 {
			o.reused = append(o.reused, fmt.Sprintf("%s on replica %d: %d", email, i, code))
		}
		o.mu.Unlock()
	}
	return true
}

// checkGroups waits until every consumer group on the broker has one
// static member per replica (group.instance.id = group + "." +
// REPLICA__ID), each holding partitions: the replicas share the work.
func checkGroups(t testing.TB, busEnv map[string]string, replicas int) {
	t.Helper()
	bus := kafka.Config{Brokers: []string{busEnv["KAFKA__BROKERS"]}, SASL: kafka.SASL{Mechanism: busEnv["KAFKA__SASL_MECHANISM"],
		User: busEnv["KAFKA__SASL_USERNAME"], Password: busEnv["KAFKA__SASL_PASSWORD"]}}
	admin, err := sarama.NewClusterAdmin(bus.Brokers, bus.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var names []string
	eventually(t, "every consumer group split over the replicas", 30*time.Second, func() error {
		groups, err := admin.ListConsumerGroups()
		if err != nil {
			return err
		}
		names = slices.Sorted(maps.Keys(groups))
		if len(names) == 0 {
			return errors.New("no consumer groups")
		}
		ds, err := admin.DescribeConsumerGroups(names)
		if err != nil {
			return err
		}
		for _, d := range ds {
			var ids []string
			for _, m := range d.Members {
				a, err := m.GetMemberAssignment()
				if err != nil {
					return err
				}
				if m.GroupInstanceId == nil || a == nil || len(a.Topics) == 0 {
					return fmt.Errorf("group %s: member %s (instance %v) holds no partitions or is not static", d.GroupId, m.MemberId, m.GroupInstanceId)
				}
				ids = append(ids, *m.GroupInstanceId)
			}
			slices.Sort(ids)
			var want []string
			for i := range replicas {
				want = append(want, fmt.Sprintf("%s.replica-%d", d.GroupId, i))
			}
			if !slices.Equal(ids, want) {
				return fmt.Errorf("group %s (%s): members %v, want %v", d.GroupId, d.State, ids, want)
			}
		}
		return nil
	})
	t.Logf("%d consumer groups, each split over %d static members: %v", len(names), replicas, names)
}

// TestReplicas runs three `cfgd serve` replicas on one `cfgd broker`, one
// Postgres database, one ClickHouse database and one Redis, under
// request-log ingestion (an API key) and OTP sign-ins spread over them;
// kills one with SIGKILL, brings it back, then restarts every replica one
// by one. Afterwards ClickHouse holds every acknowledged event exactly
// once, the key's usage counts each once, every sign-in has its one user,
// and no OTP code was accepted twice on any replica.
func TestReplicas(t *testing.T) {
	t.Parallel()
	// Timed from after the build of the binary, which a suite shares.
	cfgdBinary(t)
	start := time.Now()
	_, busEnv := startBroker(t)
	_, redisURL := startRedis(t)
	chURL, pgURL := localClickHouse(t), testenv.PostgresURL(t)
	mail := startMailbox(t)
	shared := mail.Env()
	maps.Copy(shared, busEnv)
	shared["POSTGRES__URL"], shared["CLICKHOUSE__URL"], shared["REDIS__URL"] = pgURL, chURL, redisURL
	// One key directory: the JWT and OTP keys every replica must share
	// (generated by the first start; the replicas start one at a time).
	shared["AUTH__KEYS_DIR"] = filepath.Join(t.TempDir(), "keys")
	replicas := make([]*cfgd, 3)
	for i := range replicas {
		env := maps.Clone(shared)
		env["REPLICA__ID"] = fmt.Sprintf("replica-%d", i)
		replicas[i] = newCfgd(t, env)
	}
	replicas[0].run("migrate")
	key, keyID := replicas[0].apiKey("replicas@example.com")
	for _, r := range replicas {
		r.start()
		r.waitReady(60 * time.Second)
	}
	t.Logf("broker and 3 replicas ready after %v", time.Since(start).Round(time.Millisecond))
	checkGroups(t, busEnv, len(replicas))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load, waits := ingestEach(ctx, replicas, key, keyID)
	s := newSigner(replicas[0], mail)
	otp := &otpUses{replicas: replicas, s: s}
	waits = append(waits, otp.run(ctx, 2, 50*time.Millisecond))

	load.waitAcked(t, 15)
	s.waitSigned(t, 5, 60*time.Second)
	replicas[1].kill()
	// The others keep taking load; the killed one's partitions wait for it
	// (static members) or for the session timeout, whichever comes first.
	load.waitAcked(t, load.acked()+10)
	replicas[1].start()
	replicas[1].waitReady(60 * time.Second)
	for i, r := range replicas {
		r.logs.mark("rolling restart")
		r.srv.signal(t, syscall.SIGTERM, 30*time.Second)
		r.start()
		r.waitReady(60 * time.Second)
		load.waitAcked(t, load.acked()+5)
		t.Logf("replica %d restarted (%v in)", i, time.Since(start).Round(time.Millisecond))
	}
	checkGroups(t, busEnv, len(replicas))
	signed := s.count()
	s.waitSigned(t, signed+3, 60*time.Second)
	cancel()
	for _, w := range waits {
		w()
	}

	all := merged(replicas[0], load)
	// Usage counts the posts each replica authenticated, sent once a
	// second: the SIGKILLed replica (1) may lose its last second of them,
	// every other replica stopped gracefully and sent all of its own.
	minUsage := 0
	for i, in := range load {
		if i != 1 {
			in.mu.Lock()
			minUsage += in.calls
			in.mu.Unlock()
		}
	}
	all.checkIngested(t, openClickHouse(t, chURL), openPostgres(t, pgURL), 60*time.Second, minUsage)
	s.checkUsers(t, openPostgres(t, pgURL), 45*time.Second)
	otp.mu.Lock()
	defer otp.mu.Unlock()
	if len(otp.firstUse) > 0 {
		t.Errorf("%d fresh codes were refused by the replica they were used on: %v", len(otp.firstUse), otp.firstUse)
	}
	if len(otp.reused) > 0 {
		t.Errorf("%d used codes were accepted again: %v", len(otp.reused), otp.reused)
	}
	if otp.reuseTries == 0 {
		t.Error("no used code was tried again")
	}
	t.Logf("%d sign-ins, %d second uses refused; whole test %v", s.count(), otp.reuseTries, time.Since(start).Round(time.Millisecond))
}
