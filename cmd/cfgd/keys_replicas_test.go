package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// Two `cfgd serve` replicas on one Postgres, Redis and broker, each with a
// keys directory of its own (two machines), get the same keys either from
// a keys directory they share or from settings (`cfgd keys generate
// --dir` or `--print`): a token issued by one is accepted by the other, a
// logout on one is honoured by the other within seconds, and (shared
// directory) a rotation keeps the existing tokens valid while new ones
// carry the new key.
func TestReplicasShareKeys(t *testing.T) {
	tests := []struct {
		name   string
		shared bool // a shared keys directory, else keys in the settings
	}{
		{"shared keys directory", true},
		{"keys in the settings", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mail := replicaEnv(t)
			dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
			if tc.shared {
				shared := filepath.Join(t.TempDir(), "shared")
				if code, out, msg := runCLI("keys", "generate", "--dir", shared); code != 0 {
					t.Fatalf("keys generate: %d %s %s", code, out, msg)
				}
				dirA, dirB = shared, shared
			} else {
				code, out, msg := runCLI("keys", "generate", "--print")
				if code != 0 {
					t.Fatalf("keys generate --print: %d %s", code, msg)
				}
				for _, line := range strings.Split(out, "\n") {
					if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
						t.Setenv(k, v)
					}
				}
			}
			t.Setenv("AUTH__KEYS_DIR", dirA)
			a := start(t)
			waitStatus(t, a.base+"/readyz", http.StatusOK)
			t.Setenv("AUTH__KEYS_DIR", dirB)
			b := start(t)
			waitStatus(t, b.base+"/readyz", http.StatusOK)
			ea, eb := &authtest.Env{URL: a.base, Mail: mail}, &authtest.Env{URL: b.base, Mail: mail}

			if ja, jb := ea.Do(t, http.MethodGet, "/.well-known/jwks.json", nil), eb.Do(t, http.MethodGet, "/.well-known/jwks.json", nil); string(ja.Raw) != string(jb.Raw) || len(jwksKeys(t, ja.Raw)) != 1 {
				t.Fatalf("the replicas publish different keys:\n%s\n%s", ja.Raw, jb.Raw)
			}
			fromA := ea.SignIn(t, authtest.Email("replica-a"))
			fromB := eb.SignIn(t, authtest.Email("replica-b"))
			wantStatus(t, eb, fromA.Access, http.StatusOK, "B, a token issued by A")
			wantStatus(t, ea, fromB.Access, http.StatusOK, "A, a token issued by B")
			if r := eb.Do(t, http.MethodPost, "/api/auth/token/refresh/", map[string]string{"refresh": fromA.Refresh}); r.Status != http.StatusOK {
				t.Fatalf("B refreshing A's session: %d %s", r.Status, r.Raw)
			}

			// A logout on A reaches B within seconds.
			if r := ea.Do(t, http.MethodPost, "/api/auth/logout/", map[string]string{"refresh": fromA.Refresh}); r.Status != http.StatusOK {
				t.Fatalf("logout on A: %d %s", r.Status, r.Raw)
			}
			took := waitFor(t, 5*time.Second, "B refuses the access token of a session ended on A", func() bool {
				return eb.Do(t, http.MethodGet, "/api/profile/", nil, authtest.Bearer(fromA.Access)...).Status == http.StatusUnauthorized
			})
			t.Logf("B refused the token %v after the logout on A", took.Round(time.Millisecond))
			if r := eb.Do(t, http.MethodPost, "/api/auth/token/refresh/", map[string]string{"refresh": fromA.Refresh}); r.Status != http.StatusUnauthorized {
				t.Fatalf("B refreshing a session ended on A: %d %s", r.Status, r.Raw)
			}

			for name, r := range map[string]*running{"A": a, "B": b} {
				if strings.Contains(r.stderr.String(), "generated new keys") {
					t.Errorf("replica %s generated keys of its own:\n%s", name, r.stderr)
				}
			}
			if !tc.shared {
				return
			}

			// Rotation: the old key keeps verifying, both replicas sign
			// with the new one once they have read the file again, and
			// each accepts the other's new-key tokens at the first try.
			// The rotation is a slow one: it dates its key, then its file
			// lands only after the key's activation (two reload intervals)
			// and just after B read the file, so A signs with the new key
			// as soon as it reads the file while B's last read is recent
			// and misses the key.
			oldKid := kidOf(t, fromB.Access)
			keyFile := filepath.Join(dirA, "jwt-ed25519.pem")
			staging := t.TempDir()
			copyFile(t, keyFile, filepath.Join(staging, "jwt-ed25519.pem"))
			code, out, msg := runCLI("keys", "rotate", "--dir", staging)
			if code != 0 {
				t.Fatalf("keys rotate: %d %s %s", code, out, msg)
			}
			newKid := strings.Fields(strings.TrimPrefix(out, "new signing key: kid "))[0]
			time.Sleep(2*keysReload + 100*time.Millisecond)
			eb.Do(t, http.MethodGet, "/.well-known/jwks.json", nil) // B reads the file (its interval has passed)
			if err := os.Rename(filepath.Join(staging, "jwt-ed25519.pem"), keyFile); err != nil {
				t.Fatal(err)
			}
			for _, signer := range []struct {
				name string
				e    *authtest.Env
			}{{"A", ea}, {"B", eb}} {
				var fresh authtest.Session
				waitFor(t, 10*time.Second, signer.name+" signs with the new key", func() bool {
					fresh = signer.e.SignIn(t, authtest.Email("rotated"))
					return kidOf(t, fresh.Access) == newKid
				})
				for other, o := range map[string]*authtest.Env{"A": ea, "B": eb} {
					wantStatus(t, o, fresh.Access, http.StatusOK, other+", at the first try, a new-key token from "+signer.name)
					wantStatus(t, o, fromB.Access, http.StatusOK, other+", a token of the old key "+oldKid)
				}
				if kids := jwksKeys(t, signer.e.Do(t, http.MethodGet, "/.well-known/jwks.json", nil).Raw); strings.Join(kids, ",") != newKid+","+oldKid {
					t.Fatalf("%s JWKS after rotation: %v, want %s,%s", signer.name, kids, newKid, oldKid)
				}
			}
		})
	}
}

// keysReload is JWT__KEYS_RELOAD of the replicas.
const keysReload = 300 * time.Millisecond

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// replicaEnv points serve at Postgres, a private broker both replicas
// share, the local Redis under a fresh prefix and a captured mailbox.
func replicaEnv(t *testing.T) *authtest.SMTPServer {
	t.Helper()
	baseEnv(t, testenv.PostgresURL(t))
	k := testenv.Kafka(t, 3)
	mail := authtest.StartSMTP(t)
	prefix := make([]byte, 6)
	_, _ = rand.Read(prefix)
	for name, v := range map[string]string{
		"KAFKA__BROKERS":        strings.Join(k.Brokers, ","),
		"KAFKA__SASL_MECHANISM": k.SASL.Mechanism,
		"KAFKA__SASL_USERNAME":  k.SASL.User,
		"KAFKA__SASL_PASSWORD":  k.SASL.Password,
		"KAFKA__TOPIC_PREFIX":   k.TopicPrefix,
		"REDIS__URL":            authtest.RedisURL(),
		"AUTH__REDIS_PREFIX":    "cfgd-test:" + hex.EncodeToString(prefix) + ":",
		"EMAIL__BACKEND":        "smtp",
		"EMAIL__SMTP_HOST":      mail.Host,
		"EMAIL__SMTP_PORT":      strconv.Itoa(mail.PortNumber()),
		"EMAIL__SMTP_SECURITY":  "none",
		"JWT__REVOCATION_POLL":  "200ms",
		"OTP__IP_REQUESTS":      "1000000",
		"OTP__IP_VERIFICATIONS": "1000000",
		"JWT__KEYS_RELOAD":      keysReload.String(),
		"MEDIA__DIR":            t.TempDir(),
	} {
		t.Setenv(name, v)
	}
	return mail
}

func wantStatus(t *testing.T, e *authtest.Env, access string, want int, what string) {
	t.Helper()
	if r := e.Do(t, http.MethodGet, "/api/profile/", nil, authtest.Bearer(access)...); r.Status != want {
		t.Fatalf("%s: %d %s", what, r.Status, r.Raw)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

func kidOf(t *testing.T, raw string) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	head, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(head, &h); err != nil {
		t.Fatal(err)
	}
	return h.Kid
}

func jwksKeys(t *testing.T, raw []byte) []string {
	t.Helper()
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("JWKS %s: %v", raw, err)
	}
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}
