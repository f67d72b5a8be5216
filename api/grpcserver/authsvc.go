package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	authv1 "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	"github.com/cfgd/cfgd/commands/app/signin"
	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/session"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
)

// Auth serves cfgd.auth.v1: the sign-in flows of the REST API over gRPC,
// through the same core (signin.App) with the same limits. It needs no
// credentials (Public). The core's errors are errcode outcomes
// (invalid_otp, rate_limited, ...): returned as they are, the server's one
// mapping answers them as the REST API does.
type Auth struct {
	authv1.UnimplementedAuthServiceServer
	app *signin.App
	log *slog.Logger
}

// NewAuth returns the service.
func NewAuth(app *signin.App, log *slog.Logger) *Auth { return &Auth{app: app, log: log} }

// RequestOTP implements AuthService.RequestOTP.
func (s *Auth) RequestOTP(ctx context.Context, req *authv1.RequestOTPRequest) (*authv1.RequestOTPResponse, error) {
	if req.GetChannel() != "" && req.GetChannel() != "email" {
		return nil, invalidField("channel", "only the email channel is supported")
	}
	if err := checkIdentity(req.GetIdentifier(), req.GetSourceUrl()); err != nil {
		return nil, err
	}
	err := s.app.RequestCode(ctx, otp.Request{Email: req.GetIdentifier(), SourceURL: req.GetSourceUrl(), Meta: callMeta(ctx)}, peerIP(ctx))
	if err != nil {
		return nil, err
	}
	// The same answer for every address: it says nothing about accounts.
	return &authv1.RequestOTPResponse{Success: true, Message: "A verification code has been sent to the e-mail address."}, nil
}

// VerifyOTP implements AuthService.VerifyOTP.
func (s *Auth) VerifyOTP(ctx context.Context, req *authv1.VerifyOTPRequest) (*authv1.VerifyOTPResponse, error) {
	if err := checkIdentity(req.GetIdentifier(), req.GetSourceUrl()); err != nil {
		return nil, err
	}
	if !otp.WellFormed(req.GetOtpCode()) {
		return nil, invalidField("otp_code", "must be 6 digits")
	}
	res, err := s.app.VerifyCode(ctx, otp.Verify{Email: req.GetIdentifier(), Code: req.GetOtpCode(), SourceURL: req.GetSourceUrl(), Meta: callMeta(ctx)}, peerIP(ctx))
	if err != nil {
		return nil, err
	}
	u := res.User
	return &authv1.VerifyOTPResponse{
		Success: true, Access: res.Session.Access.Token, Refresh: res.Session.Refresh.Token,
		User: &authv1.User{Id: u.ID, Email: u.Email, FirstName: u.FirstName, LastName: u.LastName},
	}, nil
}

// RefreshToken implements AuthService.RefreshToken.
func (s *Auth) RefreshToken(ctx context.Context, req *authv1.RefreshTokenRequest) (*authv1.RefreshTokenResponse, error) {
	if req.GetRefresh() == "" {
		return nil, invalidField("refresh", "this field is required")
	}
	res, err := s.app.Refresh.Handle(ctx, session.Refresh{Token: req.GetRefresh(), Meta: callMeta(ctx)})
	if err != nil {
		if errors.Is(err, session.ErrReused) {
			s.log.WarnContext(ctx, "rotated refresh token reused; session revoked")
		}
		return nil, err
	}
	out := &authv1.RefreshTokenResponse{Access: res.Access.Token}
	if res.Refresh != nil {
		out.Refresh = res.Refresh.Token
	}
	return out, nil
}

// Logout implements AuthService.Logout.
func (s *Auth) Logout(ctx context.Context, req *authv1.LogoutRequest) (*authv1.LogoutResponse, error) {
	if req.GetRefresh() == "" {
		return nil, invalidField("refresh", "this field is required")
	}
	if err := s.app.EndSession(ctx, req.GetRefresh(), callMeta(ctx)); err != nil {
		return nil, err
	}
	return &authv1.LogoutResponse{Success: true, Message: "Logged out"}, nil
}

func invalidField(field, msg string) error { return errcode.Field(field, msg) }

// checkIdentity checks the shape of an address and an optional source URL;
// the answer depends on the input alone.
func checkIdentity(email, sourceURL string) error {
	if _, err := identity.NormaliseEmail(email); err != nil {
		return invalidField("identifier", err.Error())
	}
	if sourceURL != "" {
		if _, err := user.CheckSourceURL(sourceURL); err != nil {
			return invalidField("source_url", err.Error())
		}
	}
	return nil
}

// peerIP is the caller's address, the key of the per-IP limits.
func peerIP(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// callMeta is the event metadata of a call: its x-request-id, if any.
func callMeta(ctx context.Context) events.Metadata {
	var md events.Metadata
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if v := in.Get("x-request-id"); len(v) > 0 {
			md.CorrelationID = v[0]
		}
	}
	return md
}
