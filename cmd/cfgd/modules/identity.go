package modules

import (
	"errors"
	"github.com/cfgd/cfgd/projections/projectors"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cfgd/cfgd/api/rest/analytics"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/api/rest/media"
	"github.com/cfgd/cfgd/api/rest/profile"
	"github.com/cfgd/cfgd/commands/app/signin"
)

// IdentityConfig of the module's HTTP side (the core has signin.Config).
type IdentityConfig struct {
	HTTP    auth.Config
	Media   media.Config
	Profile profile.Config
}

// DefaultIdentityConfig has every default (docs/settings.md shows them).
func DefaultIdentityConfig() IdentityConfig {
	return IdentityConfig{Media: media.DefaultConfig(), Profile: profile.DefaultConfig()}
}

// Validate joins every problem of c.
func (c IdentityConfig) Validate() error {
	return errors.Join(c.Media.Validate(), c.Profile.Validate())
}

// New returns the module over app, and its HTTP side, whose middleware
// (Staff, RequireUser, StaffOrAPIKey) other modules protect their
// endpoints with.
func Identity(app *signin.App, cfg IdentityConfig, pool *pgxpool.Pool, now func() time.Time) (Module, *auth.API, error) {
	if err := cfg.Validate(); err != nil {
		return Module{}, nil, err
	}
	store, err := media.Open(cfg.Media)
	if err != nil {
		return Module{}, nil, err
	}
	a := auth.New(app, cfg.HTTP)
	return Module{
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
		Projections: projectors.Identity(),
	}, a, nil
}
