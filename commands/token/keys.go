package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// Algorithms cfgd can sign with.
const (
	EdDSA = "EdDSA"
	HS256 = "HS256"
)

// MinSecretLength is the shortest HS256 or HMAC secret accepted (256 bits).
const MinSecretLength = 32

// Keys is one signing key and what verifies it.
type Keys struct {
	method    jwt.SigningMethod
	signKey   any
	verifyKey any
	kid       string
	jwks      []byte
}

// NewEd25519 wraps an Ed25519 private key.
func NewEd25519(priv ed25519.PrivateKey) (*Keys, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, errors.New("token: bad Ed25519 key size")
	}
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	kid := base64.RawURLEncoding.EncodeToString(sum[:12])
	jwks, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": EdDSA, "kid": kid,
		"x": base64.RawURLEncoding.EncodeToString(pub),
	}}})
	if err != nil {
		return nil, fmt.Errorf("token: jwks: %w", err)
	}
	return &Keys{method: jwt.SigningMethodEdDSA, signKey: priv, verifyKey: pub, kid: kid, jwks: jwks}, nil
}

// NewHS256 wraps a shared secret of at least MinSecretLength bytes.
func NewHS256(secret []byte) (*Keys, error) {
	if len(secret) < MinSecretLength {
		return nil, fmt.Errorf("token: an HS256 secret needs at least %d bytes", MinSecretLength)
	}
	sum := sha256.Sum256(append([]byte("cfgd-kid:"), secret...))
	return &Keys{
		method: jwt.SigningMethodHS256, signKey: secret, verifyKey: secret,
		kid:  base64.RawURLEncoding.EncodeToString(sum[:12]),
		jwks: []byte(`{"keys":[]}`),
	}, nil
}

// ParseEd25519 reads a private key given as a PKCS#8 PEM block or as the
// base64 of a 32-byte seed.
func ParseEd25519(s string) (ed25519.PrivateKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
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
		return priv, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if seed, err := enc.DecodeString(s); err == nil && len(seed) == ed25519.SeedSize {
			return ed25519.NewKeyFromSeed(seed), nil
		}
	}
	return nil, errors.New("expected a PKCS#8 PEM block or the base64 of a 32-byte seed")
}

// Load returns the keys for alg from secret when it is set, else from a file
// in dir, generated on first use with mode 0600. Several instances must
// share a key: set the secret for them.
func Load(alg, secret, dir string) (*Keys, error) {
	switch alg {
	case EdDSA:
		if secret != "" {
			priv, err := ParseEd25519(secret)
			if err != nil {
				return nil, fmt.Errorf("JWT__SIGNING_KEY: %w", err)
			}
			return NewEd25519(priv)
		}
		pemText, err := LoadOrCreateFile(filepath.Join(dir, "jwt-ed25519.pem"), func() ([]byte, error) {
			_, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return nil, err
			}
			der, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				return nil, err
			}
			return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
		})
		if err != nil {
			return nil, err
		}
		priv, err := ParseEd25519(string(pemText))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "jwt-ed25519.pem"), err)
		}
		return NewEd25519(priv)
	case HS256:
		if secret != "" {
			return NewHS256([]byte(secret))
		}
		key, err := LoadOrCreateSecret(filepath.Join(dir, "jwt-hs256.key"))
		if err != nil {
			return nil, err
		}
		return NewHS256(key)
	default:
		return nil, fmt.Errorf("token: unsupported algorithm %q", alg)
	}
}

// LoadOrCreateSecret returns the random secret stored base64-encoded in
// path, creating it (32 random bytes) when the file does not exist.
func LoadOrCreateSecret(path string) ([]byte, error) {
	text, err := LoadOrCreateFile(path, func() ([]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return []byte(base64.StdEncoding.EncodeToString(b) + "\n"), nil
	})
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(key) < MinSecretLength {
		return nil, fmt.Errorf("%s: expected the base64 of at least %d bytes", path, MinSecretLength)
	}
	return key, nil
}

// LoadOrCreateFile reads path, or writes gen's output to it with mode 0600
// (its directory 0700) when it does not exist. The file appears atomically,
// by a hard link from a temporary file, so two processes starting together
// both end up with the same key.
func LoadOrCreateFile(path string, gen func() ([]byte, error)) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("key directory: %w", err)
	}
	content, err := gen()
	if err != nil {
		return nil, fmt.Errorf("generate %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("key file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	return b, nil
}
