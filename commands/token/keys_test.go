package token_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/cfgd/cfgd/commands/token"
)

func jwksKids(t *testing.T, raw []byte) []string {
	t.Helper()
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}

func kidOf(t *testing.T, raw string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(raw, &token.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := tok.Header["kid"].(string)
	return kid
}

// A rotation keeps the tokens the old key signed valid, new tokens carry
// the new kid, the JWKS lists both, and a key is dropped only once every
// token it signed has expired.
func TestRotationKeepsOldTokensValid(t *testing.T) {
	for _, alg := range []string{token.EdDSA, token.HS256} {
		t.Run(alg, func(t *testing.T) {
			dir := t.TempDir()
			before, err := token.Load(alg, "", dir)
			if err != nil {
				t.Fatal(err)
			}
			if before.Generated() != token.KeyFile(alg, dir) {
				t.Fatalf("first load generated %q", before.Generated())
			}
			old := service(t, before, token.Config{})
			iss, err := old.Issue(token.Spec{Kind: token.Access, UserID: 7, SessionID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			r, err := token.Rotate(alg, dir, now, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if r.Kid == before.Kid() || !slices.Equal(r.Kept, []string{before.Kid()}) || len(r.Pruned) != 0 {
				t.Fatalf("rotation: %+v (old kid %s)", r, before.Kid())
			}
			after, err := token.Load(alg, "", dir)
			if err != nil {
				t.Fatal(err)
			}
			if after.Generated() != "" || !slices.Equal(after.Kids(), []string{r.Kid, before.Kid()}) {
				t.Fatalf("after rotation: kids %v, generated %q", after.Kids(), after.Generated())
			}
			s := service(t, after, token.Config{})
			if _, err := s.Parse(iss.Token, token.Access); err != nil {
				t.Fatalf("a token of the old key after rotation: %v", err)
			}
			fresh, err := s.Issue(token.Spec{Kind: token.Access, UserID: 7, SessionID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			if kidOf(t, fresh.Token) != r.Kid {
				t.Fatalf("new token kid %s, want %s", kidOf(t, fresh.Token), r.Kid)
			}
			// The old service does not know the new key.
			if _, err := old.Parse(fresh.Token, token.Access); !errors.Is(err, token.ErrInvalid) {
				t.Fatalf("a key the service does not hold verified: %v", err)
			}
			want := []string{r.Kid, before.Kid()}
			if alg == token.HS256 {
				want = nil // shared secrets are never published
			}
			if got := jwksKids(t, s.JWKS()); !slices.Equal(got, want) {
				t.Fatalf("JWKS kids %v, want %v", got, want)
			}
			if fi, err := os.Stat(r.Path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("rotated key file: %v %v", fi, err)
			}

			// A second rotation within the token lifetime keeps both old
			// keys; one after it drops the key retired a lifetime ago.
			r2, err := token.Rotate(alg, dir, now.Add(time.Hour), 24*time.Hour)
			if err != nil || len(r2.Kept) != 2 || len(r2.Pruned) != 0 {
				t.Fatalf("second rotation: %+v %v", r2, err)
			}
			r3, err := token.Rotate(alg, dir, now.Add(24*time.Hour+30*time.Minute), 24*time.Hour)
			if err != nil || !slices.Equal(r3.Kept, []string{r2.Kid, r.Kid}) || !slices.Equal(r3.Pruned, []string{before.Kid()}) {
				t.Fatalf("third rotation: %+v %v (keys %s, %s, %s)", r3, err, before.Kid(), r.Kid, r2.Kid)
			}
		})
	}
}

// Keys given as settings: JWT__SIGNING_KEY signs, JWT__VERIFY_KEYS verify
// the tokens the older keys signed.
func TestVerifyKeysFromSettings(t *testing.T) {
	for _, alg := range []string{token.EdDSA, token.HS256} {
		t.Run(alg, func(t *testing.T) {
			oldKey, _ := token.NewKeyText(alg)
			newKey, _ := token.NewKeyText(alg)
			other, _ := token.NewKeyText(alg)
			old := service(t, load(t, token.Source{Alg: alg, SigningKey: oldKey}), token.Config{})
			iss, err := old.Issue(token.Spec{Kind: token.Refresh, UserID: 1, SessionID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				name   string
				verify string
				ok     bool
			}{
				{"old key among the verify keys", other + "," + oldKey, true},
				{"old key not listed", other, false},
				{"no verify keys", "", false},
			}
			for _, tc := range tests {
				s := service(t, load(t, token.Source{Alg: alg, SigningKey: newKey, VerifyKeys: tc.verify}), token.Config{})
				_, err := s.Parse(iss.Token, token.Refresh)
				if (err == nil) != tc.ok {
					t.Errorf("%s: parse error %v", tc.name, err)
				}
			}
			if err := token.CheckVerifyKeys(alg, "short"); err == nil {
				t.Error("a bad verify key passed the check")
			}
		})
	}
}

func load(t *testing.T, src token.Source) *token.Keys {
	t.Helper()
	k, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Two replicas reading one key directory follow a rotation without a
// restart: the new key verifies at once, signs only after two reload
// intervals (when every replica has read it), and a replica that has not
// reloaded yet reads the file when a token names a key it does not know.
func TestReloadingServicesFollowRotation(t *testing.T) {
	dir := t.TempDir()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	cfg := token.Config{Issuer: "cfgd", Audience: "cfgd", AccessTTL: 15 * time.Minute, RefreshTTL: time.Hour, WebTTL: time.Hour, Now: now, ReloadEvery: time.Minute}
	replica := func(cfg token.Config) *token.Service {
		src := token.Source{Alg: token.EdDSA, Dir: dir}
		keys := load(t, src)
		src.NoCreate = true
		s, err := token.NewReloading(cfg, keys, src)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := replica(cfg)
	slow := cfg
	slow.ReloadEvery = 10 * time.Minute
	b := replica(slow)
	before, _ := a.Issue(token.Spec{Kind: token.Access, UserID: 1, SessionID: "s"})
	r, err := token.Rotate(token.EdDSA, dir, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// a has read the file (its interval passed) but the new key is too
	// young to sign: b may not know it yet.
	offset.Store(int64(90 * time.Second))
	if got, _ := a.Issue(token.Spec{Kind: token.Access, UserID: 1, SessionID: "s"}); kidOf(t, got.Token) != kidOf(t, before.Token) {
		t.Fatalf("a signs with a key younger than two reload intervals")
	}
	if kids := jwksKids(t, a.JWKS()); len(kids) != 2 || kids[0] != r.Kid {
		t.Fatalf("a's JWKS after its reload: %v", kids)
	}
	offset.Store(int64(2*time.Minute + 5*time.Second))
	after, _ := a.Issue(token.Spec{Kind: token.Access, UserID: 1, SessionID: "s"})
	if kidOf(t, after.Token) != r.Kid {
		t.Fatalf("a signs with %s two intervals after the rotation, want %s", kidOf(t, after.Token), r.Kid)
	}
	// b, not due for its own reload, reads the file for the unknown kid.
	if _, err := b.Parse(after.Token, token.Access); err != nil {
		t.Fatalf("b refused a token of the new key: %v", err)
	}
	for name, s := range map[string]*token.Service{"a": a, "b": b} {
		if _, err := s.Parse(before.Token, token.Access); err != nil {
			t.Errorf("%s refused a token of the old key: %v", name, err)
		}
	}
	// A broken file leaves the keys loaded before in place.
	var reported error
	cfg.ReloadFailed = func(err error) { reported = err }
	c := replica(cfg)
	if err := os.WriteFile(token.KeyFile(token.EdDSA, dir), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(10 * time.Minute))
	if _, err := c.Parse(after.Token, token.Access); err != nil || reported == nil {
		t.Fatalf("after a failed reload: parse %v, reported %v", err, reported)
	}
}

// countingFile counts the reads of a key file.
type countingFile struct {
	token.Source
	reads atomic.Int32
}

func (c *countingFile) Load() (*token.Keys, error) {
	c.reads.Add(1)
	return c.Source.Load()
}

// A token naming a key the replica does not know reads the key file at
// once when the file changed, so a key just rotated in verifies at the
// first try, however recent the replica's last read; while the file stays
// the same (or stays broken), a flood of tokens with made-up kids reads it
// no more, however much time passes between them.
func TestUnknownKidReadsChangedKeyFileOnce(t *testing.T) {
	dir := t.TempDir()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var failures atomic.Int32
	cfg := token.Config{Issuer: "cfgd", Audience: "cfgd", AccessTTL: 15 * time.Minute, RefreshTTL: time.Hour, WebTTL: time.Hour, Now: now,
		ReloadEvery: 24 * time.Hour, ReloadFailed: func(error) { failures.Add(1) }}
	src := token.Source{Alg: token.EdDSA, Dir: dir}
	keys := load(t, src)
	src.NoCreate = true
	file := &countingFile{Source: src}
	s, err := token.NewReloading(cfg, keys, file)
	if err != nil {
		t.Fatal(err)
	}

	// Rotated in right after this replica read the file: another replica
	// (not reloading, so its new key signs at once) issues a token of it.
	r, err := token.Rotate(token.EdDSA, dir, now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := service(t, load(t, src), token.Config{Now: now}).Issue(token.Spec{Kind: token.Access, UserID: 1, SessionID: "s", ExpiresAt: now().Add(24 * time.Hour)})
	if err != nil || kidOf(t, fresh.Token) != r.Kid {
		t.Fatalf("issue with the new key: %v", err)
	}
	if _, err := s.Parse(fresh.Token, token.Access); err != nil {
		t.Fatalf("a token of the key just rotated in, first try: %v", err)
	}
	if n := file.reads.Load(); n != 1 {
		t.Fatalf("%d reads for the rotation, want 1", n)
	}

	flood := func(what string, wantReads, wantFailures int32) {
		t.Helper()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					// Further apart than any minimum interval between reads.
					offset.Add(int64(2 * time.Second))
					if _, err := s.Parse(madeUpKid(t, now()), token.Access); !errors.Is(err, token.ErrInvalid) {
						t.Errorf("%s: a made-up kid: %v", what, err)
					}
				}
			})
		}
		wg.Wait()
		if n, f := file.reads.Load(), failures.Load(); n != wantReads || f != wantFailures {
			t.Fatalf("%s: 400 made-up kids read the file %d times (%d failed), want %d (%d)", what, n, f, wantReads, wantFailures)
		}
	}
	flood("unchanged file", 1, 0)
	if err := os.WriteFile(token.KeyFile(token.EdDSA, dir), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	flood("broken file", 2, 1)
	if _, err := s.Parse(fresh.Token, token.Access); err != nil {
		t.Fatalf("the keys read before a broken file: %v", err)
	}
}

// madeUpKid is a well-formed token signed by a key nobody knows, with a
// random kid.
func madeUpKid(t *testing.T, now time.Time) string {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Error(err)
		return ""
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, token.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Issuer: "cfgd", Audience: jwt.ClaimStrings{"cfgd"}, Subject: "1", ID: "j",
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))},
		Kind: token.Access, SessionID: "s",
	})
	tok.Header["kid"] = rand.Text()
	tok.Header["typ"] = token.TypeAccess
	raw, err := tok.SignedString(priv)
	if err != nil {
		t.Error(err)
	}
	return raw
}

// The key file of a single replica from before key sets (one key, no
// date) still loads.
func TestOlderKeyFilesLoad(t *testing.T) {
	dir := t.TempDir()
	secret := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32)))
	if err := os.WriteFile(filepath.Join(dir, "jwt-hs256.key"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := token.Load(token.HS256, "", dir)
	if err != nil || len(k.Kids()) != 1 || k.Generated() != "" {
		t.Fatalf("old HS256 file: %v %v", k, err)
	}
	same, _ := token.NewHS256([]byte(strings.Repeat("s", 32)))
	if k.Kid() != same.Kid() {
		t.Fatal("the kid of an old key changed")
	}
	if _, _, err := token.GenerateFile(token.HS256, dir); !errors.Is(err, token.ErrKeyFileExists) {
		t.Fatalf("generate over an existing file: %v", err)
	}
}
