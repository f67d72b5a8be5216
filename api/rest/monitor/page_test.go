package monitor_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/api/rest/monitor"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/browsertest"
	"github.com/cfgd/cfgd/events/requestlog"
)

// pageStack serves the monitoring endpoints and page behind the real
// staff check, over the real request-log path; it returns the server and
// a staff member's e-mail and password.
func pageStack(t *testing.T) (*authtest.Env, string, string) {
	t.Helper()
	p, store := backend(t, nil)
	env := authtest.Start(t, authtest.Options{})
	assets, err := pages.NewAssets()
	if err != nil {
		t.Fatal(err)
	}
	staff := env.API.Staff()
	served := env.WithRoutes(t, func(r *mux.Router) {
		assets.Mount(r)
		monitor.New(p, store, time.Now).Mount(r, staff, staff)
		if err := pages.MountMonitorDashboard(r, staff, assets); err != nil {
			t.Fatal(err)
		}
	})
	email, pass := authtest.Email("staff"), "s3cret-passw0rd"
	served.Superuser(t, email, pass)
	now := time.Now().UTC()
	var evs []requestlog.Event
	for i := range 30 {
		st := requestlog.StatusSuccess
		if i%5 == 0 {
			st = requestlog.StatusError
		}
		evs = append(evs, requestlog.Event{ServiceName: "shop.v1.Orders", MethodName: []string{"Get", "List", "Create"}[i%3], Status: st,
			DurationMS: int64(5 + i), CreatedAt: now.Add(-time.Duration(i) * time.Minute), Username: "ann"})
	}
	if err := p.Produce(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return served, email, pass
}

func TestDashboardAnswers(t *testing.T) {
	t.Parallel()
	env, email, pass := pageStack(t)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(email+":"+pass))
	user := env.SignIn(t, authtest.Email("user"))
	cases := []struct {
		name   string
		header []string
		status int
		want   string
	}{
		{"not signed in: the sign-in form", nil, http.StatusUnauthorized, `id="login"`},
		{"a user who is not staff", []string{"Authorization", "Bearer " + user.Access}, http.StatusForbidden, "forbidden"},
		{"staff", []string{"Authorization", basic}, http.StatusOK, `id="chart-rate"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := env.Do(t, http.MethodGet, pages.PathMonitorDashboard, nil, tc.header...)
			if r.Status != tc.status || !strings.Contains(string(r.Raw), tc.want) {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
			if tc.status != http.StatusForbidden && !strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("CSP %q", r.Header.Get("Content-Security-Policy"))
			}
		})
	}
}

func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	env, email, pass := pageStack(t)
	ctx := browsertest.Chromium(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("sign in", chromedp.Do(ctx,
		chromedp.Navigate(env.URL+pages.PathMonitorDashboard),
		chromedp.WaitVisible(css(`#login`)),
		chromedp.SendKeys(css(`#email`), email),
		chromedp.SendKeys(css(`#password`), pass),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#chart-rate`)),
	))
	// The sink may take a moment: the page refreshes every 5 s until the
	// 30 requests show.
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("stat-total").textContent === "30"`, chromedp.WithPollingTimeout(40*time.Second)))
	step("overview shown", err)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#methods tr").length === 3 && document.querySelectorAll("#requests tr").length === 30`,
		chromedp.WithPollingTimeout(20*time.Second)))
	step("tables filled", err)
	service, err := chromedp.Run(ctx, chromedp.Text(css(`#services tr td`)))
	step("services table", err)
	canvases, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart-rate canvas, #chart-errors canvas").length`))
	step("charts", err)
	desktop, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("screenshot", err)

	// The status filter narrows the latest requests to the 6 errors.
	step("filter", chromedp.Do(ctx,
		chromedp.SetValue(css(`#f-status`), "error"),
		chromedp.Click(css(`#f-apply`)),
	))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#requests tr").length === 6`, chromedp.WithPollingTimeout(20*time.Second)))
	step("filtered requests", err)

	step("phone width", chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Sleep(500*time.Millisecond)))
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	step("overflow", err)
	phone, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("phone screenshot", err)

	// A failing call is shown: a window the endpoints refuse (400).
	step("failure shown", chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("hours"); s.add(new Option("bad", "99999")); s.value = "99999"; s.dispatchEvent(new Event("change")); })()`),
		chromedp.WaitVisible(css(`#error`)),
	))
	banner, err := chromedp.Run(ctx, chromedp.Text(css(`#error`)))
	step("banner", err)

	browsertest.Keep(t, map[string][]byte{"grpc-dashboard.png": desktop, "grpc-dashboard-phone.png": phone})
	if service != "shop.v1.Orders" {
		t.Fatalf("services table starts with %q", service)
	}
	if canvases != 2 {
		t.Fatalf("%d chart canvases, want 2", canvases)
	}
	if overflow {
		t.Fatal("the page scrolls sideways at phone width")
	}
	if !strings.Contains(banner, "400") {
		t.Fatalf("error banner %q, want the 400", banner)
	}
}
