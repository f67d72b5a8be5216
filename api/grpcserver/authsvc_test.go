package grpcserver_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	authv1 "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
)

// Sign-in over gRPC runs the REST flow through the same core: a code by
// e-mail, tokens for it, the access token accepted by the other services,
// refresh, logout, and the same refusals.
func TestSignInOverGRPC(t *testing.T) {
	t.Parallel()
	e := grpctest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := authv1.NewAuthServiceClient(e.Conn)
	email := authtest.Email("grpc-signin")

	if _, err := c.RequestOTP(ctx, &authv1.RequestOTPRequest{Identifier: "not-an-address"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad address: %v", err)
	}
	if _, err := c.RequestOTP(ctx, &authv1.RequestOTPRequest{Identifier: email, Channel: "email"}); err != nil {
		t.Fatalf("request: %v", err)
	}
	m, ok := e.Mail.Last(email)
	if !ok || m.Code() == "" {
		t.Fatal("no code e-mailed")
	}
	wrong := "000000"
	if m.Code() == wrong {
		wrong = "111111"
	}
	if _, err := c.VerifyOTP(ctx, &authv1.VerifyOTPRequest{Identifier: email, OtpCode: wrong}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("wrong code: %v", err)
	}
	v, err := c.VerifyOTP(ctx, &authv1.VerifyOTPRequest{Identifier: email, OtpCode: m.Code()})
	if err != nil || v.GetAccess() == "" || v.GetRefresh() == "" || v.GetUser().GetEmail() != email {
		t.Fatalf("verify: %v %v", v, err)
	}
	bearer := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+v.GetAccess())
	if _, err := monitorv1.NewMonitorServiceClient(e.Conn).Health(bearer, &monitorv1.HealthRequest{}); err != nil {
		t.Fatalf("the access token from gRPC sign-in is refused: %v", err)
	}
	if r, err := c.RefreshToken(ctx, &authv1.RefreshTokenRequest{Refresh: v.GetRefresh()}); err != nil || r.GetAccess() == "" {
		t.Fatalf("refresh: %v %v", r, err)
	}
	if _, err := c.RefreshToken(ctx, &authv1.RefreshTokenRequest{Refresh: v.GetAccess()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("access token as refresh: %v", err)
	}
	if _, err := c.Logout(ctx, &authv1.LogoutRequest{Refresh: v.GetRefresh()}); err != nil {
		t.Fatalf("logout: %v", err)
	}
	if _, err := c.RefreshToken(ctx, &authv1.RefreshTokenRequest{Refresh: v.GetRefresh()}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("refresh after logout: %v", err)
	}
	if _, err := monitorv1.NewMonitorServiceClient(e.Conn).Health(bearer, &monitorv1.HealthRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("access token after logout: %v", err)
	}
}
