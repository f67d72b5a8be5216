package main

import (
	"fmt"
	"path/filepath"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events"
)

// eventSigner is the key the relay signs events with (and projections
// verify): EVENTS__SIGNING_KEY, or a key file generated beside the
// embedded broker's data on first run.
func eventSigner(c settings.Core) (*events.Signer, error) {
	if c.EventSigningKey.IsSet() {
		s, err := events.NewSigner([]byte(c.EventSigningKey.Reveal()))
		if err != nil {
			return nil, fmt.Errorf("EVENTS__SIGNING_KEY: %w", err)
		}
		return s, nil
	}
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
