package events_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cfgd/cfgd/events"
)

func TestLoadOrCreateSigningKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "signing.key")

	// Processes starting together agree on one key.
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := events.LoadOrCreateSigningKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) {
			t.Fatalf("two keys created: %q, %q", keys[0], k)
		}
	}
	if _, err := events.NewSigner(keys[0]); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %#o, want 0600", fi.Mode().Perm())
	}
	again, err := events.LoadOrCreateSigningKey(path)
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatalf("reload gave %q (%v), want the first key", again, err)
	}
	other, err := events.LoadOrCreateSigningKey(filepath.Join(dir, "other.key"))
	if err != nil || bytes.Equal(other, keys[0]) {
		t.Fatalf("a second data directory got %q (%v)", other, err)
	}

	tests := []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{"readable by others", string(keys[0]), 0o644},
		{"too short", "short", 0o600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			if k, err := events.LoadOrCreateSigningKey(p); err == nil {
				t.Fatalf("accepted %q", k)
			}
		})
	}
}
