package otp

import (
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
)

// code is the newest code of a stream; earlier ones are replaced.
type code struct {
	ID        string
	HMAC      string
	IssuedAt  time.Time
	ExpiresAt time.Time
	SourceURL string
	Attempts  int
	Used      bool
	Voided    bool
}

// live tells whether the code may still be verified at now: unused, not
// voided, attempts left, and younger than CodeTTL.
func (c *code) live(now time.Time) bool {
	return c != nil && !c.Used && !c.Voided && c.Attempts < MaxAttempts && now.Before(c.ExpiresAt)
}

// state is an otp stream folded.
type state struct {
	version int64
	current *code
	issued  []time.Time // every request, oldest first, for the hourly limit
}

// stateFold folds an otp stream. Events about a code other than the
// current one are stale (a newer code replaced it) and change nothing.
var stateFold = commands.NewFold(
	commands.When(func(s *state, e identity.OTPIssued) {
		s.current = &code{ID: e.CodeID, HMAC: e.CodeHMAC, IssuedAt: e.IssuedAt, ExpiresAt: e.ExpiresAt, SourceURL: e.SourceURL}
		s.issued = append(s.issued, e.IssuedAt)
	}),
	commands.When(func(s *state, e identity.OTPAttempted) {
		if s.current != nil && s.current.ID == e.CodeID {
			s.current.Attempts = e.Attempt
		}
	}),
	commands.When(func(s *state, e identity.OTPVerified) {
		if s.current != nil && s.current.ID == e.CodeID {
			s.current.Used = true
			s.current.Attempts = max(s.current.Attempts, e.Attempt)
		}
	}),
	commands.When(func(s *state, e identity.OTPDeliveryFailed) {
		if s.current != nil && s.current.ID == e.CodeID {
			s.current.Voided = true
		}
	}),
)

func fold(envs []events.Envelope) (state, error) {
	var s state
	v, err := stateFold.Apply(&s, envs)
	s.version = v
	return s, err
}

// retryAfter returns how long until another request is allowed at now, or
// zero when one is allowed: at most MaxRequestsPerHour in any rolling
// RequestWindow.
func (s state) retryAfter(now time.Time) time.Duration {
	var recent []time.Time
	for _, t := range s.issued {
		if now.Sub(t) < RequestWindow {
			recent = append(recent, t)
		}
	}
	if len(recent) < MaxRequestsPerHour {
		return 0
	}
	// The request that must leave the window is the oldest of the last
	// MaxRequestsPerHour.
	oldest := recent[len(recent)-MaxRequestsPerHour]
	return oldest.Add(RequestWindow).Sub(now)
}
