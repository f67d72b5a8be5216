package monitor_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
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
	// 30 requests of the last ten minutes (6 failing) from an API key, a
	// user and anonymous callers; 10 of cfgd's own health checks, which the
	// page hides unless asked; 5 requests of three hours ago, outside the
	// default window.
	for i := range 30 {
		st, code := requestlog.StatusSuccess, "OK"
		if i%5 == 0 {
			st, code = requestlog.StatusError, "Internal"
		}
		e := requestlog.Event{RequestID: fmt.Sprintf("req-%d", i), ServiceName: "shop.v1.Orders", MethodName: []string{"Get", "List", "Create"}[i%3], Status: st,
			GRPCStatusCode: code, DurationMS: int64([]int{8, 40, 300}[i%3] + 3*i), CreatedAt: now.Add(-time.Duration(i/3)*time.Minute - time.Duration(i%3)*7*time.Second), ClientIP: "10.0.0.9"}
		// Key 4 reports half of ci-key's rows and the anonymous ones, key
		// 5 the other half claiming key 4, user 7 its own.
		switch i % 3 {
		case 0:
			e.APIKeyID, e.APIKeyName, e.UserID, e.Username, e.IsAuthenticated = 4, "ci-key", 7, "ann", true
			e.ReportedBy = requestlog.ReportedByKey(4)
			if i%2 == 1 {
				e.ReportedBy = requestlog.ReportedByKey(5)
			}
		case 1:
			e.UserID, e.Username, e.IsAuthenticated = 7, "ann", true
			e.ReportedBy = requestlog.ReportedByUser(7)
		default:
			e.ReportedBy = requestlog.ReportedByKey(4)
		}
		if st == requestlog.StatusError {
			e.ErrorMessage = "database is down"
		}
		evs = append(evs, e)
	}
	for i := range 10 {
		evs = append(evs, requestlog.Event{ServiceName: "grpc.health.v1.Health", MethodName: "Check", Status: requestlog.StatusSuccess,
			GRPCStatusCode: "OK", DurationMS: 1, CreatedAt: now.Add(-time.Duration(i) * time.Minute)})
	}
	for i := range 5 {
		evs = append(evs, requestlog.Event{ServiceName: "shop.v1.Orders", MethodName: "Get", Status: requestlog.StatusSuccess,
			GRPCStatusCode: "OK", DurationMS: 12, CreatedAt: now.Add(-3*time.Hour - time.Duration(i)*time.Minute)})
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

// within bounds one browser step, so a step that cannot happen fails the
// test instead of hanging it.
func within(t *testing.T, ctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	t.Cleanup(cancel)
	return ctx
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
	poll := func(what, cond string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(40*time.Second)))
		if err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("error").textContent + " | " + document.getElementById("detail").outerHTML`))
			t.Logf("page at failure: %s", page)
		}
		step(what, err)
	}
	rows := func(id string) string { return `document.querySelectorAll("#` + id + ` tr:not(:has(.empty))").length` }
	step("sign in", chromedp.Do(ctx,
		chromedp.Navigate(env.URL+pages.PathMonitorDashboard),
		chromedp.WaitVisible(css(`#login`)),
		chromedp.SendKeys(css(`#email`), email),
		chromedp.SendKeys(css(`#password`), pass),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#chart-rate`)),
	))
	// The sink may take a moment: the page refreshes every 5 s until the
	// 30 requests of the last hour show, cfgd's 10 health checks hidden.
	poll("overview without cfgd's own traffic", `document.getElementById("stat-total").textContent === "30"`)
	poll("tables filled", rows("methods")+` === 3 && `+rows("requests")+` === 30 && `+rows("services")+` === 1`)
	poll("breakdowns", rows("callers")+` === 4 && `+rows("codes")+` === 2`)
	service, err := chromedp.Run(ctx, chromedp.Text(css(`#services tr td`)))
	step("services table", err)
	callers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#callers tr")].map((tr) => tr.cells[0].textContent + " | " + tr.cells[1].textContent + "=" + tr.cells[2].textContent)`))
	step("callers", err)
	codes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#codes tr")].map((tr) => tr.cells[0].textContent + "=" + tr.cells[1].textContent)`))
	step("status codes", err)
	canvases, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart-rate canvas, #chart-errors canvas, #chart-latency canvas").length`))
	step("charts", err)
	legend, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#chart-latency .u-legend .u-series:not(.partial-legend) .u-label")].map((l) => l.textContent)`))
	step("latency legend", err)
	// The last bucket of every chart is the current minute, drawn as
	// partial (its own dashed series).
	partial, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`["chart-rate", "chart-errors", "chart-latency"].map((id) => document.getElementById(id).dataset.partialFrom)`))
	step("partial bucket", err)
	desktop, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("screenshot", err)
	view, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	step("viewport screenshot", err)

	// The toggle shows cfgd's own traffic.
	step("show own traffic", chromedp.Do(ctx, chromedp.Click(css(`#f-internal`))))
	poll("own traffic shown", `document.getElementById("stat-total").textContent === "40" && `+rows("services")+` === 2 && `+rows("requests")+` === 40`)
	internal, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("screenshot with own traffic", err)
	step("hide own traffic", chromedp.Do(ctx, chromedp.Click(css(`#f-internal`))))
	poll("own traffic hidden", `document.getElementById("stat-total").textContent === "30" && `+rows("requests")+` === 30`)

	// The latest requests follow the window: 6 hours reach the 5 older ones.
	step("6-hour window", chromedp.Do(ctx, chromedp.SetValue(css(`#hours`), "6"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("hours").dispatchEvent(new Event("change"))`)))
	poll("requests of 6 hours", rows("requests")+` === 35 && document.getElementById("requests-count").textContent === "35 matching" && document.getElementById("stat-total").textContent === "35"`)
	step("1-hour window", chromedp.Do(ctx, chromedp.SetValue(css(`#hours`), "1"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("hours").dispatchEvent(new Event("change"))`)))
	poll("requests of 1 hour", rows("requests")+` === 30`)
	// Answers of the 6-hour refresh that arrive late are not drawn.
	step("settle", chromedp.Do(ctx, chromedp.Sleep(time.Second)))
	total, err := chromedp.Run(ctx, chromedp.Text(css(`#stat-total`)))
	step("cards of 1 hour", err)

	// A click on a request opens it in full.
	rowID, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#requests tr[data-id]").dataset.id`))
	step("first request", err)
	// The click is dispatched in the page: the 5-second refresh may replace
	// the row between a pointer press and its release.
	step("open detail", chromedp.Do(within(t, ctx),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#requests tr[data-id="`+rowID+`"]').click()`)))
	poll("detail shown", `document.getElementById("detail").open && document.querySelectorAll("#detail dd[data-field]").length === 16`)
	detail, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#detail dd[data-field]")].map((d) => [d.dataset.field, d.textContent]))`))
	step("detail fields", err)
	detailShot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	step("detail screenshot", err)
	step("close detail", chromedp.Do(within(t, ctx), chromedp.Click(css(`#detail-close`))))
	poll("detail closed", `!document.getElementById("detail").open`)

	// The status filter narrows the latest requests to the 6 errors.
	step("filter", chromedp.Do(ctx,
		chromedp.SetValue(css(`#f-status`), "error"),
		chromedp.Click(css(`#f-apply`)),
	))
	poll("filtered requests", rows("requests")+` === 6`)

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

	browsertest.Keep(t, map[string][]byte{"grpc-dashboard.png": desktop, "grpc-dashboard-phone.png": phone,
		"grpc-dashboard-internal.png": internal, "grpc-dashboard-detail.png": detailShot, "grpc-dashboard-top.png": view})
	if total != "30" {
		t.Errorf("back on the 1-hour window the cards count %s requests, want 30", total)
	}
	if service != "shop.v1.Orders" {
		t.Fatalf("services table starts with %q", service)
	}
	// Keyed by reporter and claim: key 5's rows claiming key 4 are its own
	// row, flagged, never in key 4's.
	if want := []string{"API key #4 | anonymous=10", "user #7 | user ann (#7)=10", "API key #4 | API key ci-key (#4)=5",
		"API key #5 | API key ci-key (#4) not the reporter=5"}; !slices.Equal(callers, want) {
		t.Errorf("callers %q, want %q", callers, want)
	}
	if want := []string{"OK=24", "INTERNAL=6"}; !slices.Equal(codes, want) {
		t.Errorf("status codes %q, want %q", codes, want)
	}
	if canvases != 3 {
		t.Fatalf("%d chart canvases, want 3", canvases)
	}
	if !slices.Equal(legend, []string{"Time", "p50", "p95", "p99"}) {
		t.Errorf("latency legend %q", legend)
	}
	current := time.Now().UTC().Truncate(time.Minute)
	for i, p := range partial {
		at, err := time.Parse(time.RFC3339, p)
		if err != nil || current.Sub(at) > 2*time.Minute || at.After(current) {
			t.Errorf("chart %d: partial bucket %q, want the current minute %v", i, p, current)
		}
	}
	if detail["id"] != rowID || detail["service_name"] != "shop.v1.Orders" || !strings.HasPrefix(detail["request_id"], "req-") || detail["client_ip"] != "10.0.0.9" ||
		!strings.HasPrefix(detail["reported_by"], "api_key:") && !strings.HasPrefix(detail["reported_by"], "user:") {
		t.Errorf("detail of %s: %v", rowID, detail)
	}
	if overflow {
		t.Fatal("the page scrolls sideways at phone width")
	}
	if !strings.Contains(banner, "400") {
		t.Fatalf("error banner %q, want the 400", banner)
	}
}
