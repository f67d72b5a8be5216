package token

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Algorithms cfgd can sign with.
const (
	EdDSA = "EdDSA"
	HS256 = "HS256"
)

// MinSecretLength is the shortest HS256 or HMAC secret accepted (256 bits).
const MinSecretLength = 32

// createdHeader is the PEM header (and the second field of an HS256 key
// line) that dates a key, so a rotation knows when an older key stopped
// signing and can drop it once no token it signed can still be valid.
const createdHeader = "Created"

// Keys is a key set: one key that signs and every key that verifies (the
// signing key and older ones kept after a rotation), each with its kid.
type Keys struct {
	method jwt.SigningMethod
	keys   []key // keys[0] signs
	jwks   []byte
	// generated is the file this load created, when it did.
	generated string
	// file is the key file these keys were read from, as opened (nil for
	// keys from settings): a reloading Service reads the file again for an
	// unknown kid only once it is another file (sameFile).
	file fs.FileInfo
}

type key struct {
	kid     string
	sign    any
	verify  any
	created time.Time // zero: unknown (keys from settings, older files)
}

// NewEd25519 wraps an Ed25519 private key that signs, and older ones that
// only verify.
func NewEd25519(priv ed25519.PrivateKey, older ...ed25519.PrivateKey) (*Keys, error) {
	var ks []key
	for _, p := range append([]ed25519.PrivateKey{priv}, older...) {
		k, err := ed25519Key(p, time.Time{})
		if err != nil {
			return nil, err
		}
		ks = append(ks, k)
	}
	return newKeys(jwt.SigningMethodEdDSA, ks)
}

func ed25519Key(priv ed25519.PrivateKey, created time.Time) (key, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return key{}, errors.New("token: bad Ed25519 key size")
	}
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	return key{kid: base64.RawURLEncoding.EncodeToString(sum[:12]), sign: priv, verify: pub, created: created}, nil
}

// NewHS256 wraps a shared secret of at least MinSecretLength bytes that
// signs, and older ones that only verify.
func NewHS256(secret []byte, older ...[]byte) (*Keys, error) {
	var ks []key
	for _, s := range append([][]byte{secret}, older...) {
		k, err := hs256Key(s, time.Time{})
		if err != nil {
			return nil, err
		}
		ks = append(ks, k)
	}
	return newKeys(jwt.SigningMethodHS256, ks)
}

func hs256Key(secret []byte, created time.Time) (key, error) {
	if len(secret) < MinSecretLength {
		return key{}, fmt.Errorf("token: an HS256 secret needs at least %d bytes", MinSecretLength)
	}
	sum := sha256.Sum256(append([]byte("cfgd-kid:"), secret...))
	return key{kid: base64.RawURLEncoding.EncodeToString(sum[:12]), sign: secret, verify: secret, created: created}, nil
}

// newKeys drops repeated keys (the signing key listed again among the
// older ones) and builds the JWKS: every Ed25519 public key, the signing
// one first; none for HS256, whose keys are shared secrets.
func newKeys(method jwt.SigningMethod, in []key) (*Keys, error) {
	if len(in) == 0 {
		return nil, errors.New("token: no keys")
	}
	k := &Keys{method: method}
	seen := map[string]bool{}
	jwks := []map[string]string{}
	for _, e := range in {
		if seen[e.kid] {
			continue
		}
		seen[e.kid] = true
		k.keys = append(k.keys, e)
		if pub, ok := e.verify.(ed25519.PublicKey); ok {
			jwks = append(jwks, map[string]string{
				"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": EdDSA, "kid": e.kid,
				"x": base64.RawURLEncoding.EncodeToString(pub),
			})
		}
	}
	var err error
	if k.jwks, err = json.Marshal(map[string]any{"keys": jwks}); err != nil {
		return nil, fmt.Errorf("token: jwks: %w", err)
	}
	return k, nil
}

// Kid is the key id of the newest key, the one that signs (for a
// reloading Service, once it is old enough: NewReloading).
func (k *Keys) Kid() string { return k.keys[0].kid }

// Kids are the key ids of every key, the signing one first.
func (k *Keys) Kids() []string {
	out := make([]string, len(k.keys))
	for i, e := range k.keys {
		out[i] = e.kid
	}
	return out
}

// Generated is the key file this load created ("" when the keys existed):
// a replica that made its own key signs tokens no other replica accepts.
func (k *Keys) Generated() string { return k.generated }

// Algorithm is the keys' signing algorithm.
func (k *Keys) Algorithm() string { return k.method.Alg() }

// signing is the key that signs at now: the newest one dated at least
// delay before now (or undated), else the oldest, so a key a rotation
// added verifies at once but signs only once every replica knows it.
func (k *Keys) signing(now time.Time, delay time.Duration) key {
	for _, e := range k.keys {
		if e.created.IsZero() || !e.created.Add(delay).After(now) {
			return e
		}
	}
	return k.keys[len(k.keys)-1]
}

// verifier is the key whose id is kid.
func (k *Keys) verifier(kid string) (any, bool) {
	for _, e := range k.keys {
		if e.kid == kid {
			return e.verify, true
		}
	}
	return nil, false
}

// ParseEd25519 reads a private key given as a PKCS#8 PEM block or as the
// base64 of a 32-byte seed.
func ParseEd25519(s string) (ed25519.PrivateKey, error) {
	keys, err := parseEd25519List(s)
	if err != nil {
		return nil, err
	}
	if len(keys) != 1 {
		return nil, fmt.Errorf("expected one key, got %d", len(keys))
	}
	return keys[0].sign.(ed25519.PrivateKey), nil
}

// parseEd25519List reads Ed25519 private keys: PKCS#8 PEM blocks one after
// the other, or the base64 of 32-byte seeds separated by commas or spaces.
func parseEd25519List(s string) ([]key, error) {
	rest := []byte(strings.TrimSpace(s))
	var out []key
	if bytes.HasPrefix(rest, []byte("-----BEGIN")) {
		for len(bytes.TrimSpace(rest)) > 0 {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				return nil, errors.New("not a PEM block")
			}
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("not a PKCS#8 private key: %w", err)
			}
			priv, ok := k.(ed25519.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("a %T, not an Ed25519 key", k)
			}
			created, _ := time.Parse(time.RFC3339, block.Headers[createdHeader])
			e, err := ed25519Key(priv, created)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	for _, f := range strings.FieldsFunc(string(rest), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		seed, ok := decodeSeed(f)
		if !ok {
			return nil, errors.New("expected a PKCS#8 PEM block or the base64 of a 32-byte seed")
		}
		e, err := ed25519Key(ed25519.NewKeyFromSeed(seed), time.Time{})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("expected a PKCS#8 PEM block or the base64 of a 32-byte seed")
	}
	return out, nil
}

func decodeSeed(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if seed, err := enc.DecodeString(s); err == nil && len(seed) == ed25519.SeedSize {
			return seed, true
		}
	}
	return nil, false
}

// parseHS256List reads HS256 secrets separated by commas (JWT__VERIFY_KEYS).
func parseHS256List(s string) ([]key, error) {
	var out []key
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		e, err := hs256Key([]byte(f), time.Time{})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Source says where the keys come from: SigningKey (JWT__SIGNING_KEY)
// signs when set, else the first key of the key file in Dir, generated on
// first use unless NoCreate; the other keys of the file and VerifyKeys
// (JWT__VERIFY_KEYS) only verify.
type Source struct {
	Alg        string
	SigningKey string
	VerifyKeys string
	Dir        string
	NoCreate   bool
}

// Load returns the keys of alg from secret when it is set, else from the
// key file in dir, generated on first use with mode 0600. Every replica
// must share the keys: set the secret for them, or share the directory.
func Load(alg, secret, dir string) (*Keys, error) {
	return Source{Alg: alg, SigningKey: secret, Dir: dir}.Load()
}

// Load reads the key set s describes.
func (s Source) Load() (*Keys, error) {
	method, err := methodOf(s.Alg)
	if err != nil {
		return nil, err
	}
	var ks []key
	generated := ""
	var file fs.FileInfo
	if s.SigningKey != "" {
		if s.Alg == EdDSA {
			priv, err := ParseEd25519(s.SigningKey)
			if err != nil {
				return nil, fmt.Errorf("JWT__SIGNING_KEY: %w", err)
			}
			e, err := ed25519Key(priv, time.Time{})
			if err != nil {
				return nil, err
			}
			ks = append(ks, e)
		} else {
			e, err := hs256Key([]byte(s.SigningKey), time.Time{})
			if err != nil {
				return nil, err
			}
			ks = append(ks, e)
		}
	} else {
		path := KeyFile(s.Alg, s.Dir)
		var text []byte
		if s.NoCreate {
			if text, file, err = readFile(path); err != nil {
				return nil, err
			}
		} else {
			var created bool
			if text, file, created, err = loadOrCreateFile(path, func() ([]byte, error) { return newKeyText(s.Alg, time.Now()) }); err != nil {
				return nil, err
			}
			if created {
				generated = path
			}
		}
		if ks, err = parseKeyFile(s.Alg, text); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if strings.TrimSpace(s.VerifyKeys) != "" {
		older, err := parseVerifyKeys(s.Alg, s.VerifyKeys)
		if err != nil {
			return nil, err
		}
		ks = append(ks, older...)
	}
	k, err := newKeys(method, ks)
	if err != nil {
		return nil, err
	}
	k.generated = generated
	k.file = file
	return k, nil
}

// Stat is the key file as it is now (nil, nil with JWT__SIGNING_KEY set:
// no file): what a reloading Service compares with the file it read last.
func (s Source) Stat() (fs.FileInfo, error) {
	if s.SigningKey != "" {
		return nil, nil
	}
	fi, err := os.Stat(KeyFile(s.Alg, s.Dir))
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return fi, nil
}

// sameFile says whether a and b are one version of one file: the same
// inode, size and modification time. cfgd replaces a key file by renaming
// a new one over it (a new inode), so a rotation always makes another file.
func sameFile(a, b fs.FileInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// readFile reads path and says which file it read: the identity comes
// from the open file, so it always matches the content, even when the
// file is replaced meanwhile.
func readFile(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read key file: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("read key file: %w", err)
	}
	return b, fi, nil
}

// CheckVerifyKeys checks JWT__VERIFY_KEYS for alg.
func CheckVerifyKeys(alg, s string) error {
	_, err := parseVerifyKeys(alg, s)
	return err
}

func parseVerifyKeys(alg, s string) ([]key, error) {
	var ks []key
	var err error
	if alg == EdDSA {
		ks, err = parseEd25519List(s)
	} else {
		ks, err = parseHS256List(s)
	}
	if err != nil {
		return nil, fmt.Errorf("JWT__VERIFY_KEYS: %w", err)
	}
	return ks, nil
}

func methodOf(alg string) (jwt.SigningMethod, error) {
	switch alg {
	case EdDSA:
		return jwt.SigningMethodEdDSA, nil
	case HS256:
		return jwt.SigningMethodHS256, nil
	}
	return nil, fmt.Errorf("token: unsupported algorithm %q", alg)
}

// KeyFile is the key file of alg in dir.
func KeyFile(alg, dir string) string {
	if alg == HS256 {
		return filepath.Join(dir, "jwt-hs256.key")
	}
	return filepath.Join(dir, "jwt-ed25519.pem")
}

// newKeyText is one fresh key in the key file format of alg.
func newKeyText(alg string, now time.Time) ([]byte, error) {
	created := now.UTC().Format(time.RFC3339)
	if alg == HS256 {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(base64.StdEncoding.EncodeToString(b) + " " + created + "\n"), nil
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{createdHeader: created}, Bytes: der}), nil
}

// NewKeyText is a fresh key of alg as the settings take it, on one line:
// the base64 of a 32-byte Ed25519 seed (EdDSA) or of 32 random bytes
// (HS256).
func NewKeyText(alg string) (string, error) {
	if _, err := methodOf(alg); err != nil {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// parseKeyFile reads a key file: PEM blocks (EdDSA) or lines of base64
// secret and optional creation date (HS256); the first key signs.
func parseKeyFile(alg string, text []byte) ([]key, error) {
	if alg == EdDSA {
		return parseEd25519List(string(text))
	}
	var ks []key
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		secret, err := base64.StdEncoding.DecodeString(f[0])
		if err != nil {
			return nil, fmt.Errorf("expected the base64 of at least %d bytes", MinSecretLength)
		}
		var created time.Time
		if len(f) > 1 {
			created, _ = time.Parse(time.RFC3339, f[1])
		}
		e, err := hs256Key(secret, created)
		if err != nil {
			return nil, err
		}
		ks = append(ks, e)
	}
	if len(ks) == 0 {
		return nil, errors.New("no key")
	}
	return ks, nil
}

// ErrKeyFileExists is returned by GenerateFile for a key file already there.
var ErrKeyFileExists = errors.New("the key file exists already")

// GenerateFile writes a new key file of alg in dir (mode 0600) and
// returns its signing key's id; it never replaces a file.
func GenerateFile(alg, dir string) (path, kid string, err error) {
	if _, err := methodOf(alg); err != nil {
		return "", "", err
	}
	path = KeyFile(alg, dir)
	if _, err := os.Stat(path); err == nil {
		return path, "", fmt.Errorf("%s: %w", path, ErrKeyFileExists)
	}
	text, _, created, err := loadOrCreateFile(path, func() ([]byte, error) { return newKeyText(alg, time.Now()) })
	if err != nil {
		return path, "", err
	}
	if !created {
		return path, "", fmt.Errorf("%s: %w", path, ErrKeyFileExists)
	}
	ks, err := parseKeyFile(alg, text)
	if err != nil {
		return path, "", err
	}
	return path, ks[0].kid, nil
}

// Rotation is what Rotate did.
type Rotation struct {
	Path   string
	Kid    string   // the new signing key
	Kept   []string // older keys that still verify
	Pruned []string // keys dropped: every token they signed has expired
}

// Rotate puts a new signing key first in the key file of alg in dir; the
// older keys stay to verify the tokens they signed, except those that
// stopped signing more than keep ago (the longest token lifetime plus the
// activation delay of NewReloading): no token of theirs can still be valid. The file is replaced atomically.
func Rotate(alg, dir string, now time.Time, keep time.Duration) (Rotation, error) {
	path := KeyFile(alg, dir)
	old, err := os.ReadFile(path)
	if err != nil {
		return Rotation{}, fmt.Errorf("read key file (run cfgd keys generate first): %w", err)
	}
	oldKeys, err := parseKeyFile(alg, old)
	if err != nil {
		return Rotation{}, fmt.Errorf("%s: %w", path, err)
	}
	fresh, err := newKeyText(alg, now)
	if err != nil {
		return Rotation{}, fmt.Errorf("generate key: %w", err)
	}
	newKeys, err := parseKeyFile(alg, fresh)
	if err != nil {
		return Rotation{}, err
	}
	r := Rotation{Path: path, Kid: newKeys[0].kid}
	out := append([]byte(nil), fresh...)
	parts := splitKeyFile(alg, old)
	retired := now // the first old key stops signing now
	for i, k := range oldKeys {
		if !retired.IsZero() && now.Sub(retired) > keep {
			r.Pruned = append(r.Pruned, k.kid)
		} else {
			r.Kept = append(r.Kept, k.kid)
			out = append(out, parts[i]...)
		}
		retired = k.created // key i+1 stopped signing when key i was made
	}
	if err := replaceFile(path, out); err != nil {
		return Rotation{}, err
	}
	return r, nil
}

// splitKeyFile cuts a key file into its keys' texts, in order.
func splitKeyFile(alg string, text []byte) [][]byte {
	var parts [][]byte
	if alg == EdDSA {
		rest := text
		for {
			block, next := pem.Decode(rest)
			if block == nil {
				return parts
			}
			parts = append(parts, pem.EncodeToMemory(block))
			rest = next
		}
	}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.TrimSpace(line) != "" {
			parts = append(parts, []byte(strings.TrimSpace(line)+"\n"))
		}
	}
	return parts
}

// replaceFile writes content to path through a temporary file (mode 0600)
// renamed over it, so a replica reading the file sees the old or the new
// set, never half of one.
func replaceFile(path string, content []byte) error {
	tmp, err := writeTemp(filepath.Dir(path), content)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	return nil
}

func writeTemp(dir string, content []byte) (string, error) {
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return "", fmt.Errorf("key file: %w", err)
	}
	_, werr := tmp.Write(content)
	err = errors.Join(tmp.Chmod(0o600), werr, tmp.Sync(), tmp.Close())
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("key file: %w", err)
	}
	return tmp.Name(), nil
}

// LoadOrCreateSecret returns the random secret stored base64-encoded in
// path, creating it (32 random bytes) when the file does not exist; created
// says it did.
func LoadOrCreateSecret(path string) (secret []byte, created bool, err error) {
	text, _, created, err := loadOrCreateFile(path, func() ([]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(base64.StdEncoding.EncodeToString(b) + "\n"), nil
	})
	if err != nil {
		return nil, false, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(key) < MinSecretLength {
		return nil, false, fmt.Errorf("%s: expected the base64 of at least %d bytes", path, MinSecretLength)
	}
	return key, created, nil
}

// loadOrCreateFile reads path, or writes gen's output to it with mode 0600
// (its directory 0700) when it does not exist; created says which, file
// which file it read. The file appears atomically, by a hard link from a
// temporary file, so two processes starting together both end up with the
// same key.
func loadOrCreateFile(path string, gen func() ([]byte, error)) (content []byte, file fs.FileInfo, created bool, err error) {
	if b, fi, err := readFile(path); err == nil {
		return b, fi, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, fmt.Errorf("key directory: %w", err)
	}
	content, err = gen()
	if err != nil {
		return nil, nil, false, fmt.Errorf("generate %s: %w", path, err)
	}
	tmp, err := writeTemp(dir, content)
	if err != nil {
		return nil, nil, false, err
	}
	defer os.Remove(tmp)
	err = os.Link(tmp, path)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, nil, false, fmt.Errorf("key file: %w", err)
	}
	created = err == nil
	b, fi, err := readFile(path)
	if err != nil {
		return nil, nil, false, err
	}
	return b, fi, created, nil
}
