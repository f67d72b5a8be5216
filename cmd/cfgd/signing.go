package main

import (
	"crypto/rand"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/relay"
)

// processSigner is a signing key that lives as long as the process: the
// relay and the projections of one `cfgd serve` share it. It bridges until
// the relay signs with the configured key (relay.Config.Signer); with
// relays in several processes each would need the same key.
func processSigner() (*events.Signer, error) {
	key := make([]byte, events.MinSigningKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("event signing key: %w", err)
	}
	return events.NewSigner(key)
}

// signingPublisher signs each message body before publishing it.
type signingPublisher struct {
	pub    relay.Publisher
	signer *events.Signer
}

func (p signingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		m.Metadata.Set(events.HeaderSignature, p.signer.Sign(m.Payload))
	}
	return p.pub.Publish(topic, msgs...)
}
