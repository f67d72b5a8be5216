// Package identity assembles the sign-in capability's module: the HTTP side
// of the sign-in core (api/auth), the profile and avatar endpoints, the
// uploaded media, the registration-source analytics, and the identity
// projections. cfgd serve and the component tests (api/auth/authtest) both
// build it with New, so a test runs exactly the routes serve mounts.
// Imported as identityapi (README, Import aliases).
package identity

import (
	"errors"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/auth"
	"github.com/cfgd/cfgd/api/media"
	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/api/profile"
	"github.com/cfgd/cfgd/commands/signin"
	identityproj "github.com/cfgd/cfgd/projections/identity"
)

// Config of the module's HTTP side (the core has signin.Config).
type Config struct {
	HTTP    auth.Config
	Media   media.Config
	Profile profile.Config
}

// DefaultConfig has every default (docs/settings.md shows them).
func DefaultConfig() Config {
	return Config{Media: media.DefaultConfig(), Profile: profile.DefaultConfig()}
}

// Validate joins every problem of c.
func (c Config) Validate() error {
	return errors.Join(c.Media.Validate(), c.Profile.Validate())
}

// New returns the module over app, and its HTTP side, whose middleware
// (Staff, RequireUser, StaffOrAPIKey) other modules protect their
// endpoints with.
func New(app *signin.App, cfg Config, pool *pgxpool.Pool, now func() time.Time) (module.Module, *auth.API, error) {
	if err := cfg.Validate(); err != nil {
		return module.Module{}, nil, err
	}
	store, err := media.Open(cfg.Media)
	if err != nil {
		return module.Module{}, nil, err
	}
	a := auth.New(app, cfg.HTTP)
	return module.Module{
		Name: "identity",
		Routes: func(r *mux.Router) error {
			a.Mount(r)
			store.Mount(r)
			if err := profile.Mount(r, cfg.Profile, profile.Deps{
				RequireUser: a.RequireUser(), Reader: app.Users, Updater: app.UpdateProfile,
				Avatars: app.ChangeAvatar, Media: store,
			}); err != nil {
				return err
			}
			analytics.Mount(r, a.Staff(), pool, now)
			return nil
		},
		Projections: identityproj.All(),
	}, a, nil
}
