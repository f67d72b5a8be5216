package user

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/store"
)

// Field limits (docs/openapi.yaml, the profile schema).
const (
	MaxNameRunes  = 30
	MaxPhoneRunes = 20
	MaxBioRunes   = 5000
)

// UpdateProfile changes the editable fields that are set (non-nil). An empty
// DateOfBirth clears it.
type UpdateProfile struct {
	UserID      int64
	FirstName   *string
	LastName    *string
	Bio         *string
	Phone       *string
	DateOfBirth *string // "YYYY-MM-DD", or "" to clear
	Meta        events.Metadata
}

// ErrNoSuchUser is returned for a user id with no stream.
var ErrNoSuchUser = errors.New("no such user")

// UpdateProfileHandler handles UpdateProfile.
type UpdateProfileHandler struct {
	pool store.DB
	now  func() time.Time
}

// NewUpdateProfileHandler returns the handler.
func NewUpdateProfileHandler(pool store.DB, now func() time.Time) *UpdateProfileHandler {
	return &UpdateProfileHandler{pool: pool, now: now}
}

// Handle validates the change (a field error, errcode.Invalid, names each bad
// field), applies it and returns the user stream version that holds it, so
// the caller can wait for the read model to catch up.
func (h *UpdateProfileHandler) Handle(ctx context.Context, cmd UpdateProfile) (int64, error) {
	now := h.now()
	clean, err := validateProfile(cmd, now)
	if err != nil {
		return 0, err
	}
	return commands.Execute(ctx, h.pool, "update profile",
		func(ctx context.Context) (*State, error) { return Load(ctx, h.pool, cmd.UserID) },
		func(_ context.Context, s *State) (commands.Decision[int64], error) {
			if s == nil {
				return commands.Decision[int64]{}, ErrNoSuchUser
			}
			next := identity.ProfileUpdated{
				UserID: s.ID, FirstName: s.FirstName, LastName: s.LastName, Bio: s.Bio, Phone: s.Phone,
				DateOfBirth: s.DateOfBirth, At: now.UTC(),
			}
			set := func(dst *string, v *string) {
				if v != nil {
					*dst = *v
				}
			}
			set(&next.FirstName, clean.FirstName)
			set(&next.LastName, clean.LastName)
			set(&next.Bio, clean.Bio)
			set(&next.Phone, clean.Phone)
			set(&next.DateOfBirth, clean.DateOfBirth)
			if next.FirstName == s.FirstName && next.LastName == s.LastName && next.Bio == s.Bio &&
				next.Phone == s.Phone && next.DateOfBirth == s.DateOfBirth {
				return commands.Decision[int64]{Result: s.Version}, nil // nothing changed: no event
			}
			stream := identity.UserStream(s.ID)
			env, err := events.New(stream, next, cmd.Meta, now)
			if err != nil {
				return commands.Decision[int64]{}, err
			}
			// The append puts the one event right after the version read.
			return commands.Decision[int64]{
				Writes: []store.Write{{Stream: stream, Expected: s.Version, Events: []events.Envelope{env}}},
				Result: s.Version + 1,
			}, nil
		})
}

func validateProfile(cmd UpdateProfile, now time.Time) (UpdateProfile, error) {
	fields := map[string]string{}
	trim := func(p *string) *string {
		if p == nil {
			return nil
		}
		v := strings.TrimSpace(*p)
		return &v
	}
	cmd.FirstName, cmd.LastName, cmd.Phone, cmd.DateOfBirth = trim(cmd.FirstName), trim(cmd.LastName), trim(cmd.Phone), trim(cmd.DateOfBirth)
	for name, v := range map[string]*string{"first_name": cmd.FirstName, "last_name": cmd.LastName} {
		if v == nil {
			continue
		}
		if msg := checkText(*v, MaxNameRunes, false); msg != "" {
			fields[name] = msg
		}
	}
	if cmd.Bio != nil {
		if msg := checkText(*cmd.Bio, MaxBioRunes, true); msg != "" {
			fields["bio"] = msg
		}
	}
	if cmd.Phone != nil {
		if msg := checkText(*cmd.Phone, MaxPhoneRunes, false); msg != "" {
			fields["phone"] = msg
		} else if strings.IndexFunc(*cmd.Phone, func(r rune) bool {
			return !(r >= '0' && r <= '9') && !strings.ContainsRune(" +-().", r)
		}) >= 0 {
			fields["phone"] = "may contain only digits, spaces and + - ( ) ."
		}
	}
	if cmd.DateOfBirth != nil && *cmd.DateOfBirth != "" {
		d, err := time.Parse(time.DateOnly, *cmd.DateOfBirth)
		switch {
		case err != nil:
			fields["date_of_birth"] = "must be a date in the form YYYY-MM-DD"
		case d.Year() < 1900:
			fields["date_of_birth"] = "must be in 1900 or later"
		case d.After(now.UTC()):
			fields["date_of_birth"] = "cannot be in the future"
		}
	}
	if len(fields) > 0 {
		return cmd, errcode.Fields(fields)
	}
	return cmd, nil
}

func checkText(v string, max int, multiline bool) string {
	if !utf8.ValidString(v) {
		return "must be valid UTF-8 text"
	}
	if n := utf8.RuneCountInString(v); n > max {
		return "must be at most " + strconv.Itoa(max) + " characters"
	}
	if strings.IndexFunc(v, func(r rune) bool {
		return unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t' || r == '\r'))
	}) >= 0 {
		return "must not contain control characters"
	}
	// A right-to-left override in a name makes every list that shows it
	// read differently from what is stored. Joiners stay allowed: Persian
	// and Indic names need them.
	if !multiline && strings.IndexFunc(v, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }) >= 0 {
		return "must not contain bidirectional-formatting characters"
	}
	return ""
}
