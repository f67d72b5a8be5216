package settings

import (
	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/media"
	"github.com/cfgd/cfgd/api/rest/profile"
	"github.com/cfgd/cfgd/deploy/config"
)

// ReadMedia reads MEDIA__DIR and MEDIA__URL.
func ReadMedia(r *config.Reader) media.Config {
	c := media.DefaultConfig()
	c.Dir = r.String("MEDIA__DIR", c.Dir)
	c.URL = r.String("MEDIA__URL", c.URL)
	if err := c.Validate(); err != nil {
		r.Fail("MEDIA__URL", "expected a path or http(s) URL ending in /", c.URL)
	}
	return c
}

// ReadProfile reads PROFILE__AVATAR_MAX_BYTES.
func ReadProfile(r *config.Reader) profile.Config {
	c := profile.DefaultConfig()
	c.AvatarMaxBytes = int64(r.IntRange("PROFILE__AVATAR_MAX_BYTES", int(c.AvatarMaxBytes), 1, 32<<20))
	return c
}

// ReadFront has no variables: the name is cfgd's and the version comes from
// the build.
func ReadFront(*config.Reader) pages.FrontConfig { return pages.DefaultFrontConfig() }
