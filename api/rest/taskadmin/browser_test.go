package taskadmin_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cfgd/cfgd/api/pages"
	"github.com/cfgd/cfgd/cmd/cfgd/browsertest"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(c *taskqueues.Config) { c.SnapshotTTL = 5 * time.Second })
	s.startWorker(t, "w-"+randomHex(3))
	q := s.Q["default"]
	for range 3 {
		s.enqueue(t, s.Q["low"], taskqueues.TypeEcho, `{"from": "browser test"}`)
	}
	s.eventually(t, 10*time.Second, "tasks ran", func() bool { return num(s.stats(t)["completed_tasks"]) == 3 })

	ctx := browsertest.Chromium(t)
	row := fmt.Sprintf(`tr[data-queue=%q]`, q)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Not signed in: the page is the sign-in form; it reloads into the
	// dashboard once the session cookie is set.
	step("sign in", chromedp.Do(ctx,
		chromedp.Navigate(s.URL+pages.PathTaskDashboard),
		chromedp.WaitVisible(css(`#login`)),
		chromedp.SendKeys(css(`#email`), s.Email),
		chromedp.SendKeys(css(`#password`), s.Pass),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#tab-overview`)),
	))
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("stat-completed").textContent === "3"`, chromedp.WithPollingTimeout(20*time.Second)))
	step("statistics shown", err)
	rate, err := chromedp.Run(ctx, chromedp.Text(css(`#stat-rate`)))
	step("success rate", err)
	step("pause", chromedp.Do(ctx,
		chromedp.Click(css(`nav button[data-tab="queues"]`)),
		chromedp.WaitVisible(css(row+` button[data-action="pause"]`)),
		chromedp.Click(css(row+` button[data-action="pause"]`)),
		// The next refresh shows the queue paused (and offers resume).
		chromedp.WaitVisible(css(row+` button[data-action="resume"]`)),
	))
	badge, err := chromedp.Run(ctx, chromedp.Text(css(row+` td.state .badge`)))
	step("badge", err)
	desktop, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("screenshot", err)
	// Phone width: no sideways scrolling, the buttons still there.
	step("phone width", chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Sleep(300*time.Millisecond),
		chromedp.WaitVisible(css(row+` button[data-action="resume"]`))))
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	step("overflow", err)
	phone, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("phone screenshot", err)
	// A refused command is shown, not swallowed: with a forged CSRF token
	// the resume is refused (403) and the banner says so.
	step("forged token", chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.cookie = "csrftoken=forged; path=/"`),
		chromedp.Click(css(row+` button[data-action="resume"]`)),
		chromedp.WaitVisible(css(`#error`)),
	))
	banner, err := chromedp.Run(ctx, chromedp.Text(css(`#error`)))
	step("banner", err)
	browsertest.Keep(t, map[string][]byte{"tasks-dashboard.png": desktop, "tasks-dashboard-phone.png": phone})
	if badge != "paused" {
		t.Fatalf("queue badge %q after pause", badge)
	}
	if rate != "100.0 %" {
		t.Fatalf("success rate shown %q", rate)
	}
	if !strings.Contains(banner, "403") {
		t.Fatalf("error banner %q, want the 403", banner)
	}
	if overflow {
		t.Fatal("the dashboard scrolls sideways at phone width")
	}
	// The browser's POST carried the CSRF token: the pause is stored.
	if got := s.queue(t, q); got["is_paused"] != true {
		t.Fatalf("queue-status after the click: %v", got)
	}
}
