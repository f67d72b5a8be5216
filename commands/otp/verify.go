package otp

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Verify submits a code for Email. SourceURL, when given, overrides the one
// remembered from the request; either is linked only if the user is new.
type Verify struct {
	Email     string
	Code      string
	SourceURL string
	Meta      events.Metadata
}

// VerifyResult is the signed-in user and their new session.
type VerifyResult struct {
	User    *user.State
	Created bool
	Session session.Pair
}

// VerifyHandler handles Verify.
type VerifyHandler struct {
	pool    store.DB
	hasher  *Hasher
	tokens  session.Tokens
	sources user.Sources
	now     func() time.Time
}

// NewVerifyHandler returns the handler.
func NewVerifyHandler(pool store.DB, hasher *Hasher, tokens session.Tokens, sources user.Sources, now func() time.Time) *VerifyHandler {
	return &VerifyHandler{pool: pool, hasher: hasher, tokens: tokens, sources: sources, now: now}
}

// Handle checks the code and signs the user in. Every way of failing is
// ErrInvalidCode, except a malformed source URL (user.ErrBadSourceURL).
//
// Every comparison is a counted attempt: its outcome is acted on and
// answered only once the statement that records it (otp.attempted for a
// miss, otp.verified for a match, which counts as the attempt) has
// committed at the stream version the code was read at. Concurrent guesses
// therefore serialise on that version, and a guess that loses the race is
// compared again against the fresh stream: N parallel guesses give at most
// MaxAttempts answered comparisons, and of two parallel right guesses
// exactly one commits.
func (h *VerifyHandler) Handle(ctx context.Context, cmd Verify) (VerifyResult, error) {
	email, err := identity.NormaliseEmail(cmd.Email)
	if err != nil || !WellFormed(cmd.Code) {
		h.hasher.Equal("", "", "", cmd.Code) // keep the cost of a failure uniform
		return VerifyResult{}, ErrInvalidCode
	}
	source := ""
	if cmd.SourceURL != "" {
		if source, err = user.CheckSourceURL(cmd.SourceURL); err != nil {
			return VerifyResult{}, err
		}
	}
	stream, claim := identity.OTPStream(email), identity.EmailStream(email)
	return commands.Execute(ctx, h.pool, "verify otp",
		// One round trip reads the code and the address claim.
		func(ctx context.Context) (verifyState, error) {
			loaded, err := store.LoadMany(ctx, h.pool, stream, claim)
			if err != nil {
				return verifyState{}, err
			}
			s, err := fold(loaded[stream])
			return verifyState{code: s, claim: loaded[claim]}, err
		},
		func(ctx context.Context, vs verifyState) (commands.Decision[VerifyResult], error) {
			return h.decide(ctx, email, cmd.Code, source, cmd.Meta, vs)
		})
}

// verifyState is what a verify decides on: the otp stream folded and the
// address claim as loaded (its user is read only if the code is live).
type verifyState struct {
	code  state
	claim []events.Envelope
}

// decide compares the code: a returning user's stream is read, a new user
// takes an id, and the decision holds everything the outcome appends.
func (h *VerifyHandler) decide(ctx context.Context, email, submitted, source string, md events.Metadata, vs verifyState) (commands.Decision[VerifyResult], error) {
	type none = commands.Decision[VerifyResult]
	now := h.now()
	stream, s := identity.OTPStream(email), vs.code
	c := s.current
	if !c.live(now) {
		h.hasher.Equal("", "", email, submitted)
		return none{}, ErrInvalidCode
	}
	// A user created after this read makes the claim below conflict, and
	// the next round finds them.
	u, err := user.FromClaim(ctx, h.pool, vs.claim)
	if err != nil {
		return none{}, err
	}
	attempt := c.Attempts + 1
	if !h.hasher.Equal(c.HMAC, c.ID, email, submitted) || (u != nil && !u.IsActive) {
		miss, err := events.New(stream, identity.OTPAttempted{CodeID: c.ID, Attempt: attempt}, md, now)
		if err != nil {
			return none{}, err
		}
		// The miss is answered only once it is counted.
		return none{Writes: []store.Write{{Stream: stream, Expected: s.version, Events: []events.Envelope{miss}}}, Err: ErrInvalidCode}, nil
	}

	var (
		res    VerifyResult
		writes []store.Write
		sid    = uuid.NewString()
	)
	if u == nil {
		if source == "" {
			source = c.SourceURL
		}
		n := user.New{Email: email, Via: identity.ViaOTP, SessionID: sid}
		if source != "" {
			n.SourceURL, n.SourceName = source, h.sources.Name(source)
		}
		id, err := user.NextID(ctx, h.pool)
		if err != nil {
			return none{}, err
		}
		if writes, u, err = user.Register(id, n, md, now); err != nil {
			return none{}, err
		}
		res.Created = true
	} else {
		us := identity.UserStream(u.ID)
		login, err := events.New(us, identity.LoggedIn{UserID: u.ID, SessionID: sid, At: now.UTC(), Method: "otp"}, md, now)
		if err != nil {
			return none{}, err
		}
		writes = append(writes, store.Write{Stream: us, Expected: u.Version, Events: []events.Envelope{login}})
		u.Version, u.LastLogin = u.Version+1, now.UTC()
	}
	verified, err := events.New(stream, identity.OTPVerified{CodeID: c.ID, Attempt: attempt, UserID: u.ID, SessionID: sid}, md, now)
	if err != nil {
		return none{}, err
	}
	started, pair, err := session.StartAPI(h.tokens, sid, u.ID, u.Version, md, now)
	if err != nil {
		return none{}, err
	}
	// At the version the code was read at, like a miss: a match that lost
	// the race to a counted miss is compared again, and never accepted
	// after the last attempt.
	writes = append(writes, started, store.Write{Stream: stream, Expected: s.version, Events: []events.Envelope{verified}})
	res.User, res.Session = u, pair
	return commands.Decision[VerifyResult]{Writes: writes, Result: res}, nil
}
