package auth

import (
	"net/http"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/commands/otp"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/identity"
)

type otpRequestBody struct {
	Identifier string `json:"identifier"`
	Channel    string `json:"channel"`
	SourceURL  string `json:"source_url"`
}

type otpRequestResponse struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
}

// handleOTPRequest: POST /api/auth/otp/request/ → otp.Request.
func (a *API) handleOTPRequest(w http.ResponseWriter, r *http.Request) {
	var body otpRequestBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	fields := map[string]string{}
	if body.Channel != "" && body.Channel != "email" {
		fields["channel"] = "only the email channel is supported"
	}
	if _, err := identity.NormaliseEmail(body.Identifier); err != nil {
		fields["identifier"] = err.Error()
	}
	checkSourceURL(fields, body.SourceURL)
	if len(fields) > 0 {
		rest.WriteError(w, errcode.Fields(fields))
		return
	}
	err := a.app.RequestCode(r.Context(), otp.Request{Email: body.Identifier, SourceURL: body.SourceURL, Meta: meta(r, "")},
		clientIP(r, a.cfg.TrustedProxies))
	if err != nil {
		// rate_limited, delivery_failed or a failure: the sign-in core
		// says which (errcode), as it does to the gRPC service.
		rest.Fail(w, r, err)
		return
	}
	// The same answer for every address: it says nothing about whether an
	// account exists.
	rest.JSON(w, http.StatusOK, otpRequestResponse{Success: true, Message: "A verification code has been sent to the e-mail address."})
}

type otpVerifyBody struct {
	Identifier string `json:"identifier"`
	OTPCode    string `json:"otp_code"`
	SourceURL  string `json:"source_url"`
}

type tokenPair struct {
	Access  string `json:"access"`
	Refresh string `json:"refresh"`
}

type verifiedUser struct {
	ID        int64  `json:"id"`
	Email     string `json:"email"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
}

type otpVerifyResponse struct {
	Success bool         `json:"success"`
	Tokens  tokenPair    `json:"tokens"`
	User    verifiedUser `json:"user"`
}

// handleOTPVerify: POST /api/auth/otp/verify/ → otp.Verify.
func (a *API) handleOTPVerify(w http.ResponseWriter, r *http.Request) {
	// Every answer, not only the 200: none may be cached next to a token.
	rest.NoStore(w)
	var body otpVerifyBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	// Shape checks depend on the input alone, so answering them precisely
	// tells nothing about any account.
	fields := map[string]string{}
	if _, err := identity.NormaliseEmail(body.Identifier); err != nil {
		fields["identifier"] = err.Error()
	}
	if !otp.WellFormed(body.OTPCode) {
		fields["otp_code"] = "must be 6 digits"
	}
	checkSourceURL(fields, body.SourceURL)
	if len(fields) > 0 {
		rest.WriteError(w, errcode.Fields(fields))
		return
	}
	res, err := a.app.VerifyCode(r.Context(), otp.Verify{Email: body.Identifier, Code: body.OTPCode, SourceURL: body.SourceURL, Meta: meta(r, "")},
		clientIP(r, a.cfg.TrustedProxies))
	if err != nil {
		// rate_limited, invalid_otp or a failure, as the sign-in core says.
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, otpVerifyResponse{
		Success: true,
		Tokens:  tokenPair{Access: res.Session.Access.Token, Refresh: res.Session.Refresh.Token},
		User:    verifiedUser{ID: res.User.ID, Email: res.User.Email, FirstName: res.User.FirstName, LastName: res.User.LastName},
	})
}

// checkSourceURL adds a field error for a malformed optional source URL; the
// request and the verify accept the same one.
func checkSourceURL(fields map[string]string, raw string) {
	if raw == "" {
		return
	}
	if _, err := user.CheckSourceURL(raw); err != nil {
		fields["source_url"] = err.Error()
	}
}
