package projectors

import (
	"context"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/projections"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// Projection names.
const (
	UsersName       = identityview.UsersProjection
	RevocationsName = identityview.RevocationsProjection
)

// Identity returns every identity projection.
func Identity() []*projections.Projection {
	return []*projections.Projection{Users(), Revocations()}
}

// IdentityGroupName is the projection group that feeds every identity projection
// from one consumer group.
const IdentityGroupName = "identity"

// IdentityGroup returns every identity projection in one group: one read of the
// topic and one transaction per batch for all of them.
func IdentityGroup() projections.Group {
	return projections.Group{Name: IdentityGroupName, Projections: Identity()}
}

// Users builds users, profiles, registration_sources and
// user_registration_sources. It handles every event of a user-<id> stream,
// so its checkpoint for that stream is the user's version, which tokens
// promise to readers.
func Users() *projections.Projection {
	p := projections.New(UsersName, "users", "profiles", "registration_sources", "user_registration_sources")
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.UserRegistered) error {
		return identityview.InsertUser(ctx, tx, identityview.NewUser{ID: e.UserID, Email: e.Email, FirstName: e.FirstName, LastName: e.LastName,
			PasswordHash: e.PasswordHash, IsActive: e.IsActive, IsStaff: e.IsStaff, IsSuperuser: e.IsSuperuser,
			JoinedAt: e.JoinedAt, SignedInAt: e.SignedInAt, Version: env.Version})
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.SourceLinked) error {
		return identityview.LinkSource(ctx, tx, e.UserID, e.SourceURL, e.SourceName, e.LinkedAt, env.Version)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.LoggedIn) error {
		return identityview.SetLastLogin(ctx, tx, e.UserID, e.At, env.Version)
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.ProfileUpdated) error {
		return identityview.UpdateProfile(ctx, tx, identityview.ProfileChange{UserID: e.UserID, FirstName: e.FirstName, LastName: e.LastName,
			Bio: e.Bio, Phone: e.Phone, DateOfBirth: e.DateOfBirth, At: e.At, Version: env.Version})
	})
	projections.On(p, func(ctx context.Context, tx projections.Tx, env events.Envelope, e *identity.AvatarChanged) error {
		return identityview.SetAvatar(ctx, tx, e.UserID, e.Avatar, e.At, env.Version)
	})
	return p
}

// Revocations builds session_revocations, the source of the access-token
// revocation set. Only revocations are projected: nothing reads a list of
// live sessions (the write side decides from the session streams), and
// every projected row costs a write.
func Revocations() *projections.Projection {
	p := projections.New(RevocationsName, "session_revocations")
	projections.On(p, func(ctx context.Context, tx projections.Tx, _ events.Envelope, e *identity.SessionRevoked) error {
		return identityview.InsertRevocation(ctx, tx, identityview.Revocation{SessionID: e.SessionID, UserID: e.UserID,
			Kind: e.Kind, Reason: e.Reason, RevokedAt: e.At, ExpiresAt: e.ExpiresAt})
	})
	return p
}
