package user

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Avatar file extensions by image format.
const (
	AvatarPNG  = "png"
	AvatarJPEG = "jpg"
	AvatarWebP = "webp"
)

// avatarNameBytes of randomness make a stored name unguessable and unique.
const avatarNameBytes = 16

// NewAvatarPath picks where a new avatar of user id is stored:
// avatars/<id>/<32 hex digits>.<ext>, relative to the media directory. The
// client never has a say in it.
func NewAvatarPath(id int64, ext string) (string, error) {
	if !validAvatarExt(ext) {
		return "", fmt.Errorf("avatar extension %q", ext)
	}
	b := make([]byte, avatarNameBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("avatar name: %w", err)
	}
	return avatarDir(id) + hex.EncodeToString(b) + "." + ext, nil
}

func avatarDir(id int64) string { return "avatars/" + strconv.FormatInt(id, 10) + "/" }

func validAvatarExt(ext string) bool {
	return ext == AvatarPNG || ext == AvatarJPEG || ext == AvatarWebP
}

// validAvatarPath accepts exactly what NewAvatarPath makes for user id.
func validAvatarPath(id int64, p string) bool {
	name, ok := strings.CutPrefix(p, avatarDir(id))
	if !ok {
		return false
	}
	stem, ext, ok := strings.Cut(name, ".")
	if !ok || !validAvatarExt(ext) || len(stem) != 2*avatarNameBytes {
		return false
	}
	_, err := hex.DecodeString(stem)
	return err == nil && strings.ToLower(stem) == stem
}

// ChangeAvatar makes the stored file Avatar (from NewAvatarPath, already
// written) the user's avatar; an empty Avatar removes it.
type ChangeAvatar struct {
	UserID int64
	Avatar string
	Meta   events.Metadata
}

// AvatarChange is the outcome: the user stream version holding it, and the
// file it replaced (empty if none), which the caller may now delete.
type AvatarChange struct {
	Version  int64
	Previous string
}

// ChangeAvatarHandler handles ChangeAvatar.
type ChangeAvatarHandler struct {
	pool store.DB
	now  func() time.Time
}

// NewChangeAvatarHandler returns the handler.
func NewChangeAvatarHandler(pool store.DB, now func() time.Time) *ChangeAvatarHandler {
	return &ChangeAvatarHandler{pool: pool, now: now}
}

// Handle appends user.avatar_changed. A path not made by NewAvatarPath for
// this user is a field error (errcode.Invalid): it would mean a path came from
// somewhere it must not.
func (h *ChangeAvatarHandler) Handle(ctx context.Context, cmd ChangeAvatar) (AvatarChange, error) {
	if cmd.Avatar != "" && !validAvatarPath(cmd.UserID, cmd.Avatar) {
		return AvatarChange{}, errcode.Field("avatar", "is not a stored avatar of this user")
	}
	now := h.now()
	return commands.Execute(ctx, h.pool, "change avatar",
		func(ctx context.Context) (*State, error) { return Load(ctx, h.pool, cmd.UserID) },
		func(_ context.Context, s *State) (commands.Decision[AvatarChange], error) {
			if s == nil {
				return commands.Decision[AvatarChange]{}, ErrNoSuchUser
			}
			if s.Avatar == cmd.Avatar {
				// A retried request: already recorded.
				return commands.Decision[AvatarChange]{Result: AvatarChange{Version: s.Version}}, nil
			}
			stream := identity.UserStream(s.ID)
			env, err := events.New(stream, identity.AvatarChanged{
				UserID: s.ID, Avatar: cmd.Avatar, Previous: s.Avatar, At: now.UTC(),
			}, cmd.Meta, now)
			if err != nil {
				return commands.Decision[AvatarChange]{}, err
			}
			return commands.Decision[AvatarChange]{
				Writes: []store.Write{{Stream: stream, Expected: s.Version, Events: []events.Envelope{env}}},
				Result: AvatarChange{Version: s.Version + 1, Previous: s.Avatar},
			}, nil
		})
}
