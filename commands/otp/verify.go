package otp

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	pool    *pgxpool.Pool
	hasher  *Hasher
	tokens  session.Tokens
	sources user.Sources
	now     func() time.Time
}

// NewVerifyHandler returns the handler.
func NewVerifyHandler(pool *pgxpool.Pool, hasher *Hasher, tokens session.Tokens, sources user.Sources, now func() time.Time) *VerifyHandler {
	return &VerifyHandler{pool: pool, hasher: hasher, tokens: tokens, sources: sources, now: now}
}

// maxVerifyRounds bounds the conflict retries. A round is lost only when
// another command appended to the same otp stream, and at most MaxAttempts
// attempts (plus one verification) can ever be appended for a code, so a
// handful of rounds always suffices.
const maxVerifyRounds = 12

// Handle checks the code and signs the user in. Every way of failing is
// ErrInvalidCode, except a malformed source URL (user.ErrBadSourceURL).
//
// Counting before comparing: within one transaction the attempt is appended
// at the version the code was read at, and only then is the code compared.
// The result leaves the transaction only once it has committed, so every
// comparison anyone learns the outcome of is a counted attempt, and
// concurrent guesses serialise on the stream version: N parallel guesses
// give at most MaxAttempts comparisons, and of two parallel right guesses
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
	return commands.Retry(ctx, maxVerifyRounds, func(ctx context.Context) (VerifyResult, error) {
		return h.round(ctx, email, cmd.Code, source, cmd.Meta)
	})
}

func (h *VerifyHandler) round(ctx context.Context, email, submitted, source string, md events.Metadata) (VerifyResult, error) {
	now := h.now()
	stream := identity.OTPStream(email)
	envs, err := store.Load(ctx, h.pool, stream)
	if err != nil {
		return VerifyResult{}, err
	}
	s, err := fold(envs)
	if err != nil {
		return VerifyResult{}, err
	}
	c := s.current
	if !c.live(now) {
		h.hasher.Equal("", "", email, submitted)
		return VerifyResult{}, ErrInvalidCode
	}
	// Read before the transaction; a user created meanwhile makes the
	// address claim below conflict, and the next round finds them.
	u, err := user.Lookup(ctx, h.pool, email)
	if err != nil {
		return VerifyResult{}, err
	}
	var (
		matched bool
		res     VerifyResult
	)
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		attempt, err := events.New(stream, identity.OTPAttempted{CodeID: c.ID, Attempt: c.Attempts + 1}, md, now)
		if err != nil {
			return err
		}
		out, err := store.Append(ctx, tx, stream, s.version, attempt)
		if err != nil {
			return err
		}
		if !h.hasher.Equal(c.HMAC, c.ID, email, submitted) || (u != nil && !u.IsActive) {
			return nil // commit the attempt alone
		}
		matched = true
		sid := uuid.NewString()
		if u == nil {
			if source == "" {
				source = c.SourceURL
			}
			n := user.New{Email: email, Via: identity.ViaOTP, SessionID: sid}
			if source != "" {
				n.SourceURL, n.SourceName = source, h.sources.Name(source)
			}
			if u, err = user.Create(ctx, tx, n, md, now); err != nil {
				return err
			}
			res.Created = true
		} else {
			us := identity.UserStream(u.ID)
			login := identity.LoggedIn{UserID: u.ID, SessionID: sid, At: now.UTC(), Method: "otp"}
			env, err := events.New(us, login, md, now)
			if err != nil {
				return err
			}
			appended, err := store.Append(ctx, tx, us, u.Version, env)
			if err != nil {
				return err
			}
			u.Version, u.LastLogin = appended[0].Version, now.UTC()
		}
		verified, err := events.New(stream, identity.OTPVerified{CodeID: c.ID, UserID: u.ID, SessionID: sid}, md, now)
		if err != nil {
			return err
		}
		if _, err := store.Append(ctx, tx, stream, out[0].Version, verified); err != nil {
			return err
		}
		res.Session, err = session.StartAPI(ctx, tx, h.tokens, sid, u.ID, u.Version, md, now)
		return err
	})
	if err != nil {
		return VerifyResult{}, fmt.Errorf("verify otp: %w", err)
	}
	if !matched {
		return VerifyResult{}, ErrInvalidCode
	}
	res.User = u
	return res, nil
}
