package settings

import (
	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/media"
	"github.com/cfgd/cfgd/api/rest/profile"
	"github.com/cfgd/cfgd/deploy/config"
)

// identityTarget is what the media and profile settings are read into.
type identityTarget struct {
	media   media.Config
	profile profile.Config
}

func newIdentityTarget() *identityTarget {
	return &identityTarget{media: media.DefaultConfig(), profile: profile.DefaultConfig()}
}

func (t *identityTarget) fields() []field { return append(t.mediaFields(), t.profileFields()...) }

func (t *identityTarget) mediaFields() []field {
	return []field{
		str(&t.media.Dir, "MEDIA__DIR", "uploaded files (avatars), served under `/media/`"),
		str(&t.media.URL, "MEDIA__URL", "prefix of the URLs shown for uploaded files (a path, or an http(s) URL of a proxy/CDN), ending in `/`"),
	}
}

func (t *identityTarget) profileFields() []field {
	return []field{
		int64Range(&t.profile.AvatarMaxBytes, "PROFILE__AVATAR_MAX_BYTES", "largest avatar upload (1..33554432)", 1, 32<<20),
	}
}

// ReadMedia reads MEDIA__DIR and MEDIA__URL.
func ReadMedia(r *config.Reader) media.Config {
	t := newIdentityTarget()
	readAll(r, t.mediaFields())
	if err := t.media.Validate(); err != nil {
		r.Fail("MEDIA__URL", "expected a path or http(s) URL ending in /", t.media.URL)
	}
	return t.media
}

// ReadProfile reads PROFILE__AVATAR_MAX_BYTES.
func ReadProfile(r *config.Reader) profile.Config {
	t := newIdentityTarget()
	readAll(r, t.profileFields())
	return t.profile
}

// ReadFront has no variables: the name is cfgd's and the version comes from
// the build.
func ReadFront(*config.Reader) pages.FrontConfig { return pages.DefaultFrontConfig() }
