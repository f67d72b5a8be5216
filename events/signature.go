package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
)

// HeaderSignature carries the HMAC-SHA256 of a message body, base64 (raw
// URL alphabet). The relay sets it on every envelope it publishes;
// projections refuse a body whose signature is missing or does not verify,
// so someone who can reach the broker cannot invent events (say, a staff
// user) without also holding the signing key.
const HeaderSignature = "signature"

// SignatureLen is the length of a HeaderSignature value.
const SignatureLen = (sha256.Size*8 + 5) / 6 // unpadded base64

// MinSigningKeyBytes is the shortest signing key accepted.
const MinSigningKeyBytes = 32

// ErrBadSignature is returned by Signer.Verify for a missing or wrong
// signature.
var ErrBadSignature = errors.New("event signature missing or invalid")

// Signer signs and verifies message bodies with one shared key.
type Signer struct {
	key []byte
}

// NewSigner returns a signer for key (at least MinSigningKeyBytes bytes).
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinSigningKeyBytes {
		return nil, errors.New("event signing key: at least 32 bytes are required")
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// Sign returns the signature header value of body.
func (s *Signer) Sign(body []byte) string {
	m := hmac.New(sha256.New, s.key)
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks sig against body in constant time.
func (s *Signer) Verify(body []byte, sig string) error {
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || sig == "" {
		return ErrBadSignature
	}
	m := hmac.New(sha256.New, s.key)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}
