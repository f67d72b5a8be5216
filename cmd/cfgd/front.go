package main

import (
	"github.com/cfgd/cfgd/api/analytics"
	"github.com/cfgd/cfgd/api/extensions"
	"github.com/cfgd/cfgd/api/front"
	"github.com/cfgd/cfgd/api/module"
	"github.com/cfgd/cfgd/api/monitor"
	tasksapi "github.com/cfgd/cfgd/api/tasks"
)

// frontModule serves / (index), /api/schema/, /api/docs/ and the embedded
// assets under /static/.
func frontModule(w wiring) module.Module {
	return front.Module(w.app.Front, w.assets,
		front.Link{Rel: "extensions", Href: extensions.ListPath, Title: "Installed extensions"},
		front.Link{Rel: "top_sources", Href: analytics.PathTopSources, Title: "Top registration sources"},
		front.Link{Rel: "source_links", Href: analytics.PathLinks, Title: "Registrations by source"},
		front.Link{Rel: "grpc_dashboard", Href: monitor.PathDashboard, Title: "gRPC monitoring"},
		front.Link{Rel: "tasks_dashboard", Href: tasksapi.PathDashboard, Title: "Task queues"},
	)
}
