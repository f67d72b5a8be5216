package pages

import (
	"net/http"

	"github.com/gorilla/mux"
)

// PathTaskDashboard is the task dashboard.
const PathTaskDashboard = "/admin/tasks/dashboard/"

// MountTaskDashboard adds the task dashboard page (staff; a sign-in form for anyone
// not signed in). Its assets are served by assets, mounted once by the
// front module.
func MountTaskDashboard(r *mux.Router, staff mux.MiddlewareFunc, assets *Assets) error {
	data := map[string]string{
		"CSS": assets.URL("tasks/dashboard.css"),
		"JS":  assets.URL("tasks/dashboard.js"),
	}
	page, err := renderFile("templates/tasks.html", data)
	if err != nil {
		return err
	}
	login, err := assets.LoginPage("Task queues", data["CSS"])
	if err != nil {
		return err
	}
	r.Handle(PathTaskDashboard, StaffPage(staff, page, login)).Methods(http.MethodGet, http.MethodHead).Name("tasks:dashboard")
	return nil
}
