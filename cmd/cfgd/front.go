package main

import (
	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/extensions"
	"github.com/cfgd/cfgd/api/front"
	"github.com/cfgd/cfgd/api/media"
	"github.com/cfgd/cfgd/api/profile"
	"github.com/cfgd/cfgd/api/static"
	"github.com/cfgd/cfgd/cmd/settings"
)

// pagesSettings configure the front door, uploaded media and the profile
// endpoints.
type pagesSettings struct {
	Front   front.Config
	Media   media.Config
	Profile profile.Config
}

// readPages reads MEDIA__DIR, MEDIA__URL and PROFILE__AVATAR_MAX_BYTES.
func readPages(r *settings.Reader) pagesSettings {
	s := pagesSettings{Front: front.DefaultConfig(), Media: media.DefaultConfig(), Profile: profile.DefaultConfig()}
	s.Media.Dir = r.String("MEDIA__DIR", s.Media.Dir)
	s.Media.URL = r.String("MEDIA__URL", s.Media.URL)
	if err := s.Media.Validate(); err != nil {
		r.Fail("MEDIA__URL", "expected a path or http(s) URL ending in /", s.Media.URL)
	}
	s.Profile.AvatarMaxBytes = int64(r.IntRange("PROFILE__AVATAR_MAX_BYTES", int(s.Profile.AvatarMaxBytes), 1, 32<<20))
	return s
}

// mountFront serves / (index), /api/schema/, /api/docs/ and the embedded
// assets under /static/.
func mountFront(router *mux.Router, s pagesSettings) error {
	assets, err := static.New()
	if err != nil {
		return err
	}
	assets.Mount(router)
	return front.Mount(router, s.Front, assets,
		front.Link{Rel: "extensions", Href: extensions.ListPath, Title: "Installed extensions"},
		front.Link{Rel: "top_sources", Href: analytics.PathTopSources, Title: "Top registration sources"},
		front.Link{Rel: "source_links", Href: analytics.PathLinks, Title: "Registrations by source"},
	)
}
