package events

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LoadOrCreateSigningKey returns the event signing key kept in the file at
// path, creating the file on first run with 32 random bytes (hex, so its
// content can be copied into EVENTS__SIGNING_KEY of another process; the
// key is the file's text). Every process that relays or projects must use
// the same key. The file is created 0600 and refused when group or others
// may read it, as ssh does with private keys.
func LoadOrCreateSigningKey(path string) ([]byte, error) {
	key, err := ReadSigningKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if _, err := CreateSigningKey(path); err != nil {
		return nil, err
	}
	return ReadSigningKey(path)
}

// ReadSigningKey reads the key file at path (an error wrapping
// fs.ErrNotExist when there is none), refusing one others may read.
func ReadSigningKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("event signing key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("event signing key %s: mode %#o lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("event signing key: %w", err)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < MinSigningKeyBytes {
		return nil, fmt.Errorf("event signing key %s: %d bytes, at least %d are required", path, len(key), MinSigningKeyBytes)
	}
	return key, nil
}

// CreateSigningKey writes a fresh key beside path and links it into place,
// so two processes starting at once agree on one key and neither reads a
// half-written file; created is false when the file was there already.
func CreateSigningKey(path string) (created bool, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("event signing key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return false, fmt.Errorf("event signing key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".signing-key-*")
	if err != nil {
		return false, fmt.Errorf("event signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(hex.EncodeToString(raw) + "\n")
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return false, fmt.Errorf("event signing key: %w", err)
	}
	// CreateTemp makes the file 0600.
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("event signing key: %w", err)
	}
	return true, nil
}
