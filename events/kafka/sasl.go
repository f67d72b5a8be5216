package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// SASL mechanisms a Config may name.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASL is how cfgd authenticates to the brokers. An empty Mechanism
// connects without authentication.
type SASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User      string
	Password  string
}

func (s SASL) validate() error {
	var errs []error
	switch s.Mechanism {
	case "":
		if s.User != "" || s.Password != "" {
			errs = append(errs, errors.New("bus: SASL user or password given without a mechanism"))
		}
		return errors.Join(errs...)
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		errs = append(errs, fmt.Errorf("bus: SASL mechanism %q is not one of %s, %s, %s", s.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512))
	}
	if s.User == "" {
		errs = append(errs, errors.New("bus: SASL user is required"))
	}
	if s.Password == "" {
		errs = append(errs, errors.New("bus: SASL password is required"))
	}
	return errors.Join(errs...)
}

func (s SASL) apply(c *sarama.Config) {
	if s.Mechanism == "" {
		return
	}
	c.Net.SASL.Enable = true
	c.Net.SASL.Handshake = true
	c.Net.SASL.User = s.User
	c.Net.SASL.Password = s.Password
	c.Net.SASL.Mechanism = sarama.SASLMechanism(s.Mechanism)
	switch s.Mechanism {
	case SASLScramSHA256:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case SASLScramSHA512:
		c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	}
}

// scramClient is sarama's SCRAM hook over xdg-go/scram.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return fmt.Errorf("scram client: %w", err)
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) {
	return c.conv.Step(challenge)
}

func (c *scramClient) Done() bool { return c.conv.Done() }
