package signin

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/token"
	"github.com/cfgd/cfgd/events"
)

// The sign-in flows as every transport runs them: the per-IP throttles,
// the command, and for a wrong code the failure floor. HTTP (api/auth) and
// gRPC (api/rpc, cfgd.auth.v1) check the shape of their input, call these
// and map the outcome to their status codes.

// ErrIPThrottled is wrapped by a *ThrottledError of the per-IP OTP limits.
var ErrIPThrottled = errors.New("too many requests from this address")

// RequestCode throttles clientIP (OTP__IP_REQUESTS per OTP__IP_WINDOW)
// and runs otp.Request. A *ThrottledError or *otp.RateLimitedError says
// when to come back.
func (a *App) RequestCode(ctx context.Context, cmd otp.Request, clientIP string) error {
	if err := a.throttleIP(ctx, "otp-request", clientIP, a.Config.IPRequests); err != nil {
		return err
	}
	_, err := a.RequestOTP.Handle(ctx, cmd)
	return err
}

// VerifyCode throttles clientIP (OTP__IP_VERIFICATIONS per window) and
// runs otp.Verify. otp.ErrInvalidCode comes no sooner than FailureFloor
// after the call began, whatever made the code invalid, so timing tells
// nothing about the account.
func (a *App) VerifyCode(ctx context.Context, cmd otp.Verify, clientIP string) (otp.VerifyResult, error) {
	start := time.Now()
	if err := a.throttleIP(ctx, "otp-verify", clientIP, a.Config.IPVerifications); err != nil {
		return otp.VerifyResult{}, err
	}
	res, err := a.VerifyOTP.Handle(ctx, cmd)
	if errors.Is(err, otp.ErrInvalidCode) {
		waitUntil(ctx, start.Add(a.Config.FailureFloor))
	}
	return res, err
}

// EndSession logs out the session a refresh token names; this process
// refuses the session's tokens at once, the others when their revocation
// set next reloads. A token that does not parse is ErrInvalidToken.
func (a *App) EndSession(ctx context.Context, refresh string, md events.Metadata) error {
	claims, err := a.Tokens.Parse(refresh, token.Refresh)
	if err != nil {
		return ErrInvalidToken
	}
	return a.EndSessionOf(ctx, claims, md)
}

// EndSessionOf logs out the session of verified claims; the actor is the
// session's user unless md names one.
func (a *App) EndSessionOf(ctx context.Context, c *token.Claims, md events.Metadata) error {
	if md.Actor == "" {
		md.Actor = "user:" + strconv.FormatInt(c.UserID(), 10)
	}
	until, err := a.Logout.Handle(ctx, session.Logout{SessionID: c.SessionID, UserID: c.UserID(), Meta: md})
	if errors.Is(err, session.ErrNoSession) {
		return ErrInvalidToken
	}
	if err != nil {
		return err
	}
	a.Revocations.Add(c.SessionID, until.Add(time.Minute))
	return nil
}

func (a *App) throttleIP(ctx context.Context, what, clientIP string, limit int) error {
	ok, wait, err := a.Limiter.Hit(ctx, what+":ip:"+clientIP, limit, a.Config.IPWindow)
	if err != nil {
		// Failing open would let a client spray addresses unchecked.
		return err
	}
	if !ok {
		return &ThrottledError{RetryAfter: wait, cause: ErrIPThrottled}
	}
	return nil
}

func waitUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
