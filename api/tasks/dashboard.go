package tasks

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/static"
)

// PathDashboard is the task dashboard.
const PathDashboard = "/admin/tasks/dashboard/"

// The page is plain HTML; its styles and scripts are shared static
// assets (api/static/assets/tasks/), served from the binary
// with the other pages' cache headers: no CDN, no build step.
//
//go:embed dashboard/index.html
var pages embed.FS

// MountDashboard adds the dashboard page (staff; a sign-in form for anyone
// not signed in). Its assets are served by assets, mounted once by the
// front module.
func MountDashboard(r *mux.Router, staff mux.MiddlewareFunc, assets *static.Assets) error {
	data := map[string]string{
		"CSS": assets.URL("tasks/dashboard.css"),
		"JS":  assets.URL("tasks/dashboard.js"),
	}
	page, err := render("dashboard/index.html", data)
	if err != nil {
		return err
	}
	login, err := assets.LoginPage("Task queues", data["CSS"])
	if err != nil {
		return err
	}
	r.Handle(PathDashboard, static.StaffPage(staff, page, login)).Methods(http.MethodGet, http.MethodHead).Name("tasks:dashboard")
	return nil
}

func render(name string, data any) ([]byte, error) {
	t, err := template.ParseFS(pages, name)
	if err != nil {
		return nil, fmt.Errorf("task dashboard %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("task dashboard %s: %w", name, err)
	}
	return b.Bytes(), nil
}
