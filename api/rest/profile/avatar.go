package profile

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/image/webp"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/user"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
)

// Avatar limits.
const (
	// DefaultAvatarMaxBytes is PROFILE__AVATAR_MAX_BYTES's default.
	DefaultAvatarMaxBytes = 2 << 20
	// maxAvatarMaxBytes caps the setting: the file is held in memory.
	maxAvatarMaxBytes = 32 << 20
	// MaxAvatarSide bounds either side of an avatar in pixels, so a small
	// file cannot be a huge image that exhausts whoever decodes it.
	MaxAvatarSide = 8192
	// MaxAvatarPixels bounds width × height (2048 × 2048, 16 MiB as RGBA):
	// the side bound alone lets a 63 KB PNG of 8192 × 8192 through, 256 MiB
	// for every browser that shows it. Plenty for an avatar.
	MaxAvatarPixels = 4 << 20
	// multipartOverhead is what the request may carry besides the file:
	// part headers and boundaries.
	multipartOverhead = 64 << 10
	// avatarField is the multipart field holding the image.
	avatarField = "avatar"
)

// Config configures the profile endpoints.
type Config struct {
	// AvatarMaxBytes is the largest avatar file accepted.
	AvatarMaxBytes int64
}

// DefaultConfig is the configuration without overrides.
func DefaultConfig() Config { return Config{AvatarMaxBytes: DefaultAvatarMaxBytes} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.AvatarMaxBytes < 1 || c.AvatarMaxBytes > maxAvatarMaxBytes {
		errs = append(errs, fmt.Errorf("profile: AvatarMaxBytes %d is not from 1 to %d", c.AvatarMaxBytes, maxAvatarMaxBytes))
	}
	return errors.Join(errs...)
}

func (h *handler) uploadAvatar(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.PrincipalFrom(r.Context())
	data, refused := h.readAvatar(w, r)
	if refused != nil {
		rest.WriteError(w, refused)
		return
	}
	ext, problem := detectImage(data)
	if problem != "" {
		rest.WriteError(w, errcode.Fields(map[string]string{avatarField: problem}))
		return
	}
	name, err := user.NewAvatarPath(p.UserID, ext)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	if err := h.media.Write(name, data); err != nil {
		rest.Fail(w, r, err)
		return
	}
	res, err := h.avatars.Handle(r.Context(), user.ChangeAvatar{UserID: p.UserID, Avatar: name, Meta: meta(r, p.UserID)})
	if err != nil {
		// Nothing points at the new file: remove it so no orphan is left.
		h.remove(r, name)
		h.commandFailed(w, r, err)
		return
	}
	// Only now that the new file is recorded may the old one go.
	if res.Previous != "" && res.Previous != name {
		h.remove(r, res.Previous)
	}
	h.respond(w, r, p.UserID, max(res.Version, p.UserVersion))
}

func (h *handler) deleteAvatar(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.PrincipalFrom(r.Context())
	res, err := h.avatars.Handle(r.Context(), user.ChangeAvatar{UserID: p.UserID, Meta: meta(r, p.UserID)})
	if err != nil {
		h.commandFailed(w, r, err)
		return
	}
	if res.Previous != "" {
		h.remove(r, res.Previous)
	}
	h.respond(w, r, p.UserID, max(res.Version, p.UserVersion))
}

func meta(r *http.Request, userID int64) events.Metadata {
	return events.Metadata{CorrelationID: rest.RequestID(r.Context()), Actor: "user:" + strconv.FormatInt(userID, 10)}
}

// remove deletes a file nothing refers to any more. A failure leaves an
// orphan file, not a wrong answer, so it is logged and the request goes on.
func (h *handler) remove(r *http.Request, name string) {
	if err := h.media.Remove(name); err != nil {
		slog.WarnContext(r.Context(), "avatar file not removed", "file", name, "err", err)
	}
}

func (h *handler) commandFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, user.ErrNoSuchUser):
		rest.WriteError(w, errcode.New(errcode.NotFound, "no such user"))
	default:
		rest.Fail(w, r, err)
	}
}

// readAvatar returns the bytes of the multipart field "avatar", or an
// error to answer (a field error, or too_large). The part's file name and Content-Type are
// ignored: only the content decides what the file is, and the server names
// it.
func (h *handler) readAvatar(w http.ResponseWriter, r *http.Request) ([]byte, *errcode.Error) {
	limit := h.cfg.AvatarMaxBytes
	tooLarge := fmt.Sprintf("avatar is larger than the limit of %d bytes", limit)
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, errcode.Field(avatarField, "send the image as multipart/form-data in the field \"avatar\"")
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+multipartOverhead)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, errcode.Field(avatarField, "send the image as multipart/form-data in the field \"avatar\"")
	}
	for {
		part, err := mr.NextPart()
		var big *http.MaxBytesError
		switch {
		case errors.As(err, &big):
			return nil, errcode.New(errcode.TooLarge, tooLarge)
		case errors.Is(err, io.EOF):
			return nil, errcode.Field(avatarField, "is required: send the image in the multipart field \"avatar\"")
		case err != nil:
			return nil, errcode.Field(avatarField, "the multipart body is malformed")
		}
		if part.FormName() != avatarField {
			_ = part.Close() // the next NextPart skips what is left of it
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, limit+1))
		switch {
		case errors.As(err, &big), err == nil && int64(len(data)) > limit:
			return nil, errcode.New(errcode.TooLarge, tooLarge)
		case err != nil:
			return nil, errcode.Field(avatarField, "the multipart body is malformed")
		case len(data) == 0:
			return nil, errcode.Field(avatarField, "is empty")
		}
		return data, nil
	}
}

// detectImage tells a PNG, JPEG or WebP file from its first bytes (the
// WHATWG sniffing rules, which check the RIFF....WEBPVP header of WebP),
// then decodes the image header (never the pixels) to be sure the rest
// agrees and the dimensions are within bounds. It returns the
// file extension, or what is wrong.
func detectImage(data []byte) (ext, problem string) {
	ct := http.DetectContentType(data)
	var decode func(io.Reader) (image.Config, error)
	var format string
	switch ct {
	case "image/png":
		ext, format, decode = user.AvatarPNG, "PNG", png.DecodeConfig
	case "image/jpeg":
		ext, format, decode = user.AvatarJPEG, "JPEG", jpeg.DecodeConfig
	case "image/webp":
		ext, format, decode = user.AvatarWebP, "WebP", webp.DecodeConfig
	default:
		kind, _, _ := strings.Cut(ct, ";")
		return "", "must be a PNG, JPEG or WebP image; the file's content is " + kind
	}
	cfg, err := decode(bytes.NewReader(data))
	switch {
	case err != nil:
		return "", "starts like a " + format + " image but is not a valid one"
	case cfg.Width < 1 || cfg.Height < 1:
		return "", "has no pixels"
	case cfg.Width > MaxAvatarSide || cfg.Height > MaxAvatarSide:
		return "", fmt.Sprintf("is %dx%d pixels; at most %d on either side", cfg.Width, cfg.Height, MaxAvatarSide)
	case int64(cfg.Width)*int64(cfg.Height) > MaxAvatarPixels:
		return "", fmt.Sprintf("is %dx%d pixels; at most %d pixels in all (2048x2048)", cfg.Width, cfg.Height, MaxAvatarPixels)
	}
	return ext, ""
}
