// Package profile serves GET and PATCH /api/profile/ and POST and DELETE
// /api/profile/avatar/ for the holder of a Bearer access token: the user
// and profile read models (readmodels/identity), profile changes through
// commands/user.UpdateProfile, avatars stored through api/media and
// recorded through commands/user.ChangeAvatar.
package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/readmodels/identityview"
)

// Paths of the profile endpoints.
const (
	Path       = "/api/profile/"
	AvatarPath = "/api/profile/avatar/"
)

// Reader is the read model the endpoint reads.
type Reader interface {
	Profile(ctx context.Context, id, atLeast int64) (identityview.User, identityview.Profile, error)
}

// Updater is the command the endpoint runs.
type Updater interface {
	Handle(ctx context.Context, cmd user.UpdateProfile) (int64, error)
}

// AvatarChanger is the command that records a new avatar.
type AvatarChanger interface {
	Handle(ctx context.Context, cmd user.ChangeAvatar) (user.AvatarChange, error)
}

// Media stores avatar files and tells their address; *media.Store is the
// real one.
type Media interface {
	Write(name string, data []byte) error
	Remove(name string) error
	URL(name string) string
}

// Deps are what the endpoints call.
type Deps struct {
	RequireUser mux.MiddlewareFunc
	Reader      Reader
	Updater     Updater
	Avatars     AvatarChanger
	Media       Media
}

// Mount adds the profile and avatar endpoints, each behind d.RequireUser.
func Mount(r *mux.Router, cfg Config, d Deps) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	h := &handler{cfg: cfg, reader: d.Reader, updater: d.Updater, avatars: d.Avatars, media: d.Media}
	r.Handle(Path, d.RequireUser(http.HandlerFunc(h.get))).Methods(http.MethodGet, http.MethodHead).Name("profile:get")
	r.Handle(Path, d.RequireUser(http.HandlerFunc(h.patch))).Methods(http.MethodPatch).Name("profile:update")
	r.Handle(AvatarPath, d.RequireUser(http.HandlerFunc(h.uploadAvatar))).Methods(http.MethodPost).Name("profile:avatar-upload")
	r.Handle(AvatarPath, d.RequireUser(http.HandlerFunc(h.deleteAvatar))).Methods(http.MethodDelete).Name("profile:avatar-delete")
	return nil
}

type handler struct {
	cfg     Config
	reader  Reader
	updater Updater
	avatars AvatarChanger
	media   Media
}

// UserView is the user part of the answer.
type UserView struct {
	ID          int64      `json:"id"`
	Email       string     `json:"email"`
	FirstName   string     `json:"first_name"`
	LastName    string     `json:"last_name"`
	FullName    string     `json:"full_name"`
	ShortName   string     `json:"short_name"`
	IsActive    bool       `json:"is_active"`
	IsStaff     bool       `json:"is_staff"`
	IsSuperuser bool       `json:"is_superuser"`
	DateJoined  time.Time  `json:"date_joined"`
	LastLogin   *time.Time `json:"last_login"`
}

// ProfileView is the profile part of the answer.
type ProfileView struct {
	Bio    string  `json:"bio"`
	Avatar *string `json:"avatar"` // URL of the image

	Phone       string    `json:"phone"`
	DateOfBirth *string   `json:"date_of_birth"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Response of both methods.
type Response struct {
	Success bool        `json:"success"`
	User    UserView    `json:"user"`
	Profile ProfileView `json:"profile"`
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.PrincipalFrom(r.Context())
	h.respond(w, r, p.UserID, p.UserVersion)
}

// respond answers with the user as of at least version: right after a
// verify or a change, it waits for the projection instead of showing stale
// data (read-your-writes).
func (h *handler) respond(w http.ResponseWriter, r *http.Request, id, version int64) {
	u, prof, err := h.reader.Profile(r.Context(), id, version)
	switch {
	case err == nil:
	case errors.Is(err, identityview.ErrNotFound):
		rest.WriteError(w, errcode.New(errcode.NotFound, "no profile for this user"))
		return
	default:
		rest.Fail(w, r, err)
		return
	}
	var avatar *string
	if prof.Avatar != nil {
		u := h.media.URL(*prof.Avatar)
		avatar = &u
	}
	var login *time.Time
	if u.LastLogin != nil {
		t := u.LastLogin.UTC()
		login = &t
	}
	rest.JSON(w, http.StatusOK, Response{
		Success: true,
		User: UserView{
			ID: u.ID, Email: u.Email, FirstName: u.FirstName, LastName: u.LastName, FullName: u.FullName(), ShortName: u.ShortName(),
			IsActive: u.IsActive, IsStaff: u.IsStaff, IsSuperuser: u.IsSuperuser, DateJoined: u.DateJoined.UTC(), LastLogin: login,
		},
		Profile: ProfileView{
			Bio: prof.Bio, Avatar: avatar, Phone: prof.Phone, DateOfBirth: prof.DateOfBirth,
			CreatedAt: prof.CreatedAt.UTC(), UpdatedAt: prof.UpdatedAt.UTC(),
		},
	})
}

// patchBody distinguishes a field left out from one set to null.
type patchBody struct {
	FirstName   optional `json:"first_name"`
	LastName    optional `json:"last_name"`
	Bio         optional `json:"bio"`
	Phone       optional `json:"phone"`
	DateOfBirth optional `json:"date_of_birth"`
}

// optional is a JSON string field that may be absent, null or a string.
type optional struct {
	set   bool
	null  bool
	value string
	bad   bool
}

func (o *optional) UnmarshalJSON(b []byte) error {
	o.set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		o.null = true
		return nil
	}
	if err := json.Unmarshal(b, &o.value); err != nil {
		o.bad = true // reported per field, not as a malformed body
	}
	return nil
}

func (h *handler) patch(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.PrincipalFrom(r.Context())
	var body patchBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	cmd := user.UpdateProfile{UserID: p.UserID, Meta: events.Metadata{
		CorrelationID: rest.RequestID(r.Context()), Actor: "user:" + strconv.FormatInt(p.UserID, 10),
	}}
	fields := map[string]string{}
	for _, f := range []struct {
		name     string
		in       optional
		dst      **string
		nullable bool
	}{
		{"first_name", body.FirstName, &cmd.FirstName, false},
		{"last_name", body.LastName, &cmd.LastName, false},
		{"bio", body.Bio, &cmd.Bio, false},
		{"phone", body.Phone, &cmd.Phone, false},
		{"date_of_birth", body.DateOfBirth, &cmd.DateOfBirth, true},
	} {
		switch {
		case !f.in.set:
		case f.in.bad:
			fields[f.name] = "must be a string"
		case f.in.null && !f.nullable:
			fields[f.name] = "may not be null; send \"\" to clear it"
		default:
			v := f.in.value // null clears date_of_birth
			*f.dst = &v
		}
	}
	if len(fields) > 0 {
		rest.WriteError(w, errcode.Fields(fields))
		return
	}
	version, err := h.updater.Handle(r.Context(), cmd)
	switch {
	case err == nil:
		h.respond(w, r, p.UserID, max(version, p.UserVersion))
	case errors.Is(err, user.ErrNoSuchUser):
		rest.WriteError(w, errcode.New(errcode.NotFound, "no such user"))
	default:
		rest.Fail(w, r, err)
	}
}
