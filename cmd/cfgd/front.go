package main

import (
	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/analytics"
	"github.com/cfgd/cfgd/api/rest/extensions"
	"github.com/cfgd/cfgd/cmd/cfgd/modules"
)

// frontModule serves / (index), /api/schema/, /api/docs/ and the embedded
// assets under /static/.
func frontModule(w wiring) modules.Module {
	return modules.Front(w.app.Front, w.assets,
		pages.Link{Rel: "extensions", Href: extensions.ListPath, Title: "Installed extensions"},
		pages.Link{Rel: "top_sources", Href: analytics.PathTopSources, Title: "Top registration sources"},
		pages.Link{Rel: "source_links", Href: analytics.PathLinks, Title: "Registrations by source"},
		pages.Link{Rel: "grpc_dashboard", Href: pages.PathMonitorDashboard, Title: "gRPC monitoring"},
		pages.Link{Rel: "tasks_dashboard", Href: pages.PathTaskDashboard, Title: "Task queues"},
	)
}
