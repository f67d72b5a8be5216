package pages

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// PathMonitorDashboard is the gRPC monitoring page.
const PathMonitorDashboard = "/admin/grpc/dashboard/"

// MountMonitorDashboard adds the monitoring page: staff get the page, anyone not
// signed in a sign-in form. Its scripts and styles are the shared static
// assets (mounted once by the front module, under Prefix).
func MountMonitorDashboard(r *mux.Router, staff mux.MiddlewareFunc, assets *Assets) error {
	data := map[string]string{
		"CSS":      assets.URL("cfgd/monitor.css"),
		"ChartCSS": assets.URL("uplot/uPlot.min.css"),
		"Chart":    assets.URL("uplot/uPlot.iife.min.js"),
		"JS":       assets.URL("cfgd/monitor.js"),
		// The services the page hides unless asked, from the one list.
		"Internal": strings.Join(requestlogview.InternalServices(), " "),
	}
	page, err := renderFile("templates/monitor.html", data)
	if err != nil {
		return err
	}
	login, err := assets.LoginPage("gRPC monitoring", data["CSS"])
	if err != nil {
		return err
	}
	r.Handle(PathMonitorDashboard, StaffPage(staff, page, login)).Methods(http.MethodGet, http.MethodHead).Name("monitor:dashboard")
	return nil
}
