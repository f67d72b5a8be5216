// Package identity holds the events of passwordless sign-in: one-time codes,
// users, their profiles and registration sources, and sessions. Each payload
// carries only what a projector or a later decision needs; no plain code,
// password or token is ever stored: codes appear as HMACs, passwords as
// argon2id hashes, refresh tokens by their random id (jti) alone.
//
// Streams:
//
//	otp-<email>         codes issued to one normalised address
//	user-email-<email>  claims the address for one user id (uniqueness)
//	user-<id>           a user and their profile
//	session-<uuid>      one signed-in session (API token pair or admin cookie)
package identity

import "time"

// OTPIssued: a code was generated for Email. Only CodeHMAC, bound to the
// code id and the address, is kept. A new code replaces every earlier one.
type OTPIssued struct {
	CodeID    string    `json:"code_id"`
	Email     string    `json:"email"`
	CodeHMAC  string    `json:"code_hmac"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
	SourceURL string    `json:"source_url,omitempty"` // remembered for the verify
}

func (OTPIssued) EventType() string { return "otp.issued" }

// OTPDeliveryFailed: the e-mail carrying CodeID could not be sent, so the
// code is void: nobody can have received it, and it must never verify.
type OTPDeliveryFailed struct {
	CodeID string `json:"code_id"`
	Reason string `json:"reason"`
}

func (OTPDeliveryFailed) EventType() string { return "otp.delivery_failed" }

// OTPAttempted: a verification of CodeID failed and was counted. The
// outcome is answered only after this event committed at the version the
// code was read at, so concurrent guesses serialise on the stream version
// and can never exceed the attempt limit.
type OTPAttempted struct {
	CodeID  string `json:"code_id"`
	Attempt int    `json:"attempt"` // 1-based
}

func (OTPAttempted) EventType() string { return "otp.attempted" }

// OTPVerified: CodeID matched on attempt Attempt (which it counts) and is
// now used; SessionID was started for UserID.
type OTPVerified struct {
	CodeID    string `json:"code_id"`
	Attempt   int    `json:"attempt"` // 1-based
	UserID    int64  `json:"user_id"`
	SessionID string `json:"session_id"`
}

func (OTPVerified) EventType() string { return "otp.verified" }

// EmailClaimed is the only event of a user-email-<email> stream. Appending
// it with events.NoStream is what makes an address belong to one user even
// under concurrent sign-ups.
type EmailClaimed struct {
	Email  string `json:"email"`
	UserID int64  `json:"user_id"`
}

func (EmailClaimed) EventType() string { return "user.email_claimed" }

// Registration methods.
const (
	ViaOTP     = "otp"
	ViaCommand = "create-superuser"
)

// UserRegistered opens a user-<id> stream. A profile is created with it.
// When the registration is itself a sign-in (the first OTP verify of an
// address), SignedInAt and SessionID say so and no separate LoggedIn
// follows: one event, one projection transaction.
type UserRegistered struct {
	UserID       int64      `json:"user_id"`
	Email        string     `json:"email"`
	FirstName    string     `json:"first_name"`
	LastName     string     `json:"last_name"`
	PasswordHash string     `json:"password_hash,omitempty"` // argon2id PHC string; empty: no password
	IsActive     bool       `json:"is_active"`
	IsStaff      bool       `json:"is_staff"`
	IsSuperuser  bool       `json:"is_superuser"`
	JoinedAt     time.Time  `json:"joined_at"`
	Via          string     `json:"via"`
	SignedInAt   *time.Time `json:"signed_in_at,omitempty"`
	SessionID    string     `json:"session_id,omitempty"`
}

func (UserRegistered) EventType() string { return "user.registered" }

// SourceLinked: a user who was just created came from SourceURL. It only
// ever follows UserRegistered in the same append. The display name is
// derived on the write side so that a replay gives the same names whatever
// the settings are by then.
type SourceLinked struct {
	UserID     int64     `json:"user_id"`
	SourceURL  string    `json:"source_url"`
	SourceName string    `json:"source_name"`
	LinkedAt   time.Time `json:"linked_at"`
}

func (SourceLinked) EventType() string { return "user.source_linked" }

// LoggedIn: the user signed in (OTP or admin password); sets last_login.
type LoggedIn struct {
	UserID    int64     `json:"user_id"`
	SessionID string    `json:"session_id"`
	At        time.Time `json:"at"`
	Method    string    `json:"method"` // "otp" or "password"
}

func (LoggedIn) EventType() string { return "user.logged_in" }

// ProfileUpdated carries the whole editable state after a change, not a
// diff, so a projector needs no earlier state to apply it.
type ProfileUpdated struct {
	UserID      int64     `json:"user_id"`
	FirstName   string    `json:"first_name"`
	LastName    string    `json:"last_name"`
	Bio         string    `json:"bio"`
	Phone       string    `json:"phone"`
	DateOfBirth string    `json:"date_of_birth,omitempty"` // YYYY-MM-DD; empty: unset
	At          time.Time `json:"at"`
}

func (ProfileUpdated) EventType() string { return "user.profile_updated" }

// AvatarChanged: the user's avatar is now the file Avatar, a path relative
// to the media directory (avatars/<user id>/<random>.<ext>), chosen by the
// server; empty means no avatar. Previous is the path it replaces, so a
// reactor can clean up without reading earlier events.
type AvatarChanged struct {
	UserID   int64     `json:"user_id"`
	Avatar   string    `json:"avatar"`
	Previous string    `json:"previous,omitempty"`
	At       time.Time `json:"at"`
}

func (AvatarChanged) EventType() string { return "user.avatar_changed" }

// Session kinds.
const (
	SessionAPI = "api" // JWT access/refresh pair from an OTP sign-in
	SessionWeb = "web" // admin cookie session from a password login
)

// SessionStarted opens a session-<uuid> stream. RefreshID is the jti of the
// refresh token handed out (API sessions only).
type SessionStarted struct {
	SessionID   string    `json:"session_id"`
	UserID      int64     `json:"user_id"`
	Kind        string    `json:"kind"`
	RefreshID   string    `json:"refresh_id,omitempty"`
	UserVersion int64     `json:"user_version"` // user stream version at sign-in
	StartedAt   time.Time `json:"started_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

func (SessionStarted) EventType() string { return "session.started" }

// SessionRefreshed: with refresh rotation on, PreviousID was exchanged for
// RefreshID. Presenting PreviousID again is a reuse and revokes the session.
type SessionRefreshed struct {
	SessionID  string    `json:"session_id"`
	PreviousID string    `json:"previous_id"`
	RefreshID  string    `json:"refresh_id"`
	At         time.Time `json:"at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func (SessionRefreshed) EventType() string { return "session.refreshed" }

// Revocation reasons.
const (
	RevokedLogout = "logout"
	RevokedReuse  = "refresh_reuse"
)

// SessionRevoked ends a session: its refresh token stops at once, its
// access tokens as soon as the revocation set has seen this event. It
// carries what the revocation set needs, so session.started need not be
// projected.
type SessionRevoked struct {
	SessionID string    `json:"session_id"`
	UserID    int64     `json:"user_id"`
	Kind      string    `json:"kind"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	ExpiresAt time.Time `json:"expires_at"` // when the session would have ended
}

func (SessionRevoked) EventType() string { return "session.revoked" }
