package monitor

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/static"
)

// PathDashboard is the monitoring page.
const PathDashboard = "/admin/grpc/dashboard/"

// MountDashboard adds the monitoring page: staff get the page, anyone not
// signed in a sign-in form. Its scripts and styles are the shared static
// assets (mounted once by the front module, under static.Prefix).
func MountDashboard(r *mux.Router, staff mux.MiddlewareFunc, assets *static.Assets) error {
	data := map[string]string{
		"CSS":      assets.URL("cfgd/monitor.css"),
		"ChartCSS": assets.URL("uplot/uPlot.min.css"),
		"Chart":    assets.URL("uplot/uPlot.iife.min.js"),
		"JS":       assets.URL("cfgd/monitor.js"),
	}
	page, err := render("dashboard", dashboardHTML, data)
	if err != nil {
		return err
	}
	login, err := assets.LoginPage("gRPC monitoring", data["CSS"])
	if err != nil {
		return err
	}
	r.Handle(PathDashboard, static.StaffPage(staff, page, login)).Methods(http.MethodGet, http.MethodHead).Name("monitor:dashboard")
	return nil
}

func render(name, text string, data any) ([]byte, error) {
	t, err := template.New(name).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("monitor: parse %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("monitor: render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

const dashboardHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gRPC monitoring · cfgd</title>
<link rel="stylesheet" href="{{.ChartCSS}}">
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<header>
  <h1>gRPC monitoring</h1>
  <span id="updated" class="muted" aria-live="polite">loading…</span>
  <label>Window
    <select id="hours">
      <option value="1" selected>last hour</option>
      <option value="6">6 hours</option>
      <option value="24">24 hours</option>
      <option value="168">7 days</option>
      <option value="720">30 days</option>
    </select>
  </label>
</header>
<div id="error" class="error" role="alert" hidden></div>
<main>
  <div class="cards">
    <div class="card"><div class="label">Requests</div><div class="value" id="stat-total">–</div></div>
    <div class="card"><div class="label">Failed</div><div class="value" id="stat-failed">–</div></div>
    <div class="card"><div class="label">Success rate</div><div class="value" id="stat-rate">–</div></div>
    <div class="card"><div class="label">Avg duration</div><div class="value" id="stat-avg">–</div></div>
    <div class="card"><div class="label">Services</div><div class="value" id="stat-services">–</div></div>
    <div class="card"><div class="label">Active API keys</div><div class="value" id="stat-keys">–</div></div>
  </div>
  <section class="charts" aria-label="charts">
    <div class="chart-box"><h2>Requests per minute <span class="muted" id="chart-step"></span></h2><div id="chart-rate" class="chart"></div></div>
    <div class="chart-box"><h2>Error rate (%)</h2><div id="chart-errors" class="chart"></div></div>
  </section>
  <section>
    <h2>Services</h2>
    <table>
      <thead><tr><th>Service</th><th class="num">Requests</th><th class="num">Failed</th><th class="num">Success</th><th class="num">Avg</th><th class="num">p95</th><th class="num">Methods</th></tr></thead>
      <tbody id="services"></tbody>
    </table>
  </section>
  <section>
    <h2>Methods</h2>
    <table>
      <thead><tr><th>Service</th><th>Method</th><th class="num">Requests</th><th class="num">Failed</th><th class="num">Success</th><th class="num">Avg</th><th class="num">Min / max</th><th class="num">p95</th></tr></thead>
      <tbody id="methods"></tbody>
    </table>
  </section>
  <section>
    <h2>Latest requests <span class="muted" id="requests-count"></span></h2>
    <form id="filters" class="filters">
      <input id="f-service" placeholder="service" aria-label="service" autocomplete="off">
      <input id="f-method" placeholder="method" aria-label="method" autocomplete="off">
      <select id="f-status" aria-label="status">
        <option value="">any status</option>
        <option>success</option><option>error</option><option>timeout</option><option>cancelled</option><option>pending</option>
      </select>
      <button type="submit" id="f-apply">Filter</button>
    </form>
    <table>
      <thead><tr><th>Time</th><th>Service</th><th>Method</th><th>Status</th><th>Code</th><th class="num">Duration</th><th>Caller</th><th>Error</th></tr></thead>
      <tbody id="requests"></tbody>
    </table>
  </section>
</main>
<script src="{{.Chart}}"></script>
<script src="{{.JS}}"></script>
</body>
</html>
`
