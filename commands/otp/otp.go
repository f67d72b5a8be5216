// Package otp holds the command handlers of the one-time-code aggregate
// (stream otp-<normalised email>): requesting a code, which sends it by
// e-mail, and verifying it, which signs the user in and creates them on
// their first success.
//
// The e-mail is sent synchronously by the request command, right after
// otp.issued is committed, and not by a reactor: the caller must learn
// that delivery failed (503), and a replay of the log must never send mail.
// When sending fails, otp.delivery_failed voids the code.
package otp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/cfgd/cfgd/deploy/errcode"
)

// Limits (docs/api.md, passwordless sign-in; docs/settings.md).
const (
	CodeLength         = 6
	CodeTTL            = 300 * time.Second
	MaxAttempts        = 3
	MaxRequestsPerHour = 3
	RequestWindow      = time.Hour
)

// Errors of the OTP commands.
var (
	// ErrInvalidCode is the one answer to a wrong, used, expired, exhausted,
	// voided or unknown code, so a caller learns nothing about the account.
	ErrInvalidCode = errcode.New(errcode.InvalidOTP, "Invalid or expired code")
	// ErrDeliveryFailed: the code could not be sent and has been voided.
	ErrDeliveryFailed = errcode.New(errcode.DeliveryFailed, "The verification code could not be sent. Try again shortly.")
)

// RateLimitedError refuses a fourth request within the hour.
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("too many requests, retry in %s", e.RetryAfter.Round(time.Second))
}

// As offers the error to transports as errcode.RateLimited.
func (e *RateLimitedError) As(target any) bool {
	p, ok := target.(**errcode.Error)
	if ok {
		*p = errcode.RetryLater("Too many requests", e.RetryAfter)
	}
	return ok
}

// Hasher turns a code into the HMAC stored in events, under a server-side
// key, bound to the code id and address so equal codes never look equal.
type Hasher struct {
	key []byte
}

// NewHasher returns a Hasher; the key must have at least 32 bytes.
func NewHasher(key []byte) (*Hasher, error) {
	if len(key) < 32 {
		return nil, errors.New("otp: the HMAC key needs at least 32 bytes")
	}
	// A purpose-specific subkey: the same secret may serve other HMACs.
	m := hmac.New(sha256.New, key)
	m.Write([]byte("cfgd otp code v1"))
	return &Hasher{key: m.Sum(nil)}, nil
}

// Sum returns the hex HMAC of code for codeID and email.
func (h *Hasher) Sum(codeID, email, code string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(codeID))
	m.Write([]byte{0})
	m.Write([]byte(email))
	m.Write([]byte{0})
	m.Write([]byte(code))
	return hex.EncodeToString(m.Sum(nil))
}

// Equal compares a submitted code with a stored HMAC in constant time.
func (h *Hasher) Equal(storedHMAC, codeID, email, code string) bool {
	return hmac.Equal([]byte(storedHMAC), []byte(h.Sum(codeID, email, code)))
}

var codeSpace = big.NewInt(1_000_000)

// NewCode returns CodeLength uniformly random digits from crypto/rand.
func NewCode() (string, error) {
	n, err := rand.Int(rand.Reader, codeSpace)
	if err != nil {
		return "", fmt.Errorf("otp: random code: %w", err)
	}
	return fmt.Sprintf("%06d", n.Int64()), nil
}

// WellFormed tells whether s is CodeLength ASCII digits.
func WellFormed(s string) bool {
	if len(s) != CodeLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
