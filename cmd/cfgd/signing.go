package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/cfgd/cfgd/cmd/settings"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/signing"
)

// eventKeyFile is the event signing key's file in AUTH__KEYS_DIR, written
// by `cfgd keys generate` beside the JWT and OTP keys.
const eventKeyFile = "event-signing.key"

// eventSigner is the key the relay signs events with (and projections
// verify): EVENTS__SIGNING_KEY, else event-signing.key in keysDir when
// `cfgd keys generate` wrote it, else a key file generated beside the
// embedded broker's data on first run; generated names that file when
// this call made it.
func eventSigner(c settings.Core, keysDir string) (s *events.Signer, generated string, err error) {
	if c.EventSigningKey.IsSet() {
		s, err := events.NewSigner([]byte(c.EventSigningKey.Reveal()))
		if err != nil {
			return nil, "", fmt.Errorf("EVENTS__SIGNING_KEY: %w", err)
		}
		return s, "", nil
	}
	path := filepath.Join(keysDir, eventKeyFile)
	key, err := events.ReadSigningKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		path = filepath.Join(filepath.Dir(filepath.Clean(c.KafkaDataDir)), "signing.key")
		created, cerr := events.CreateSigningKey(path)
		if cerr != nil {
			return nil, "", cerr
		}
		if created {
			generated = path
		}
		key, err = events.ReadSigningKey(path)
	}
	if err != nil {
		return nil, "", err
	}
	if s, err = events.NewSigner(key); err != nil {
		return nil, "", fmt.Errorf("event signing key %s: %w", path, err)
	}
	return s, generated, nil
}

// cutover is the signing cut-over of topic (a record topic cfgd began
// signing in 0.1.0's line): its sink and its replay accept the unsigned
// records an older cfgd wrote below the watermark it records in Postgres.
func (w wiring) cutover(topic string) *signing.Cutover {
	return signing.New(w.deps.pg, w.bus, topic, w.log)
}
