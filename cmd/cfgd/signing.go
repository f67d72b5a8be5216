package main

import (
	"fmt"
	"path/filepath"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events"
)

// eventSigner loads the key the relay signs events with (and projections
// verify), generating it beside the embedded broker's data on first run.
func eventSigner(c settings.Core) (*events.Signer, error) {
	path := filepath.Join(filepath.Dir(filepath.Clean(c.KafkaDataDir)), "signing.key")
	key, err := events.LoadOrCreateSigningKey(path)
	if err != nil {
		return nil, err
	}
	s, err := events.NewSigner(key)
	if err != nil {
		return nil, fmt.Errorf("event signing key %s: %w", path, err)
	}
	return s, nil
}
