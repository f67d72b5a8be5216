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
	"github.com/cfgd/cfgd/events/tasks"
)

// The Tasks tab lists a queue's tasks by state with payload and last
// error; a per-task action and a bulk action show their effect on the next
// refresh, and a running worker is offered no Start.
func TestTaskDashboardActionsInChromium(t *testing.T) {
	t.Parallel()
	// Failed attempts wait an hour for their retry: they stay listed as
	// retry with their error while the browser looks.
	s := startStack(t, func(c *taskqueues.Config) { c.RetryDelay = time.Hour; c.MaxRetries = 3 })
	worker := "w-" + randomHex(3)
	s.startWorker(t, worker)
	q := s.Q["low"]
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = s.enqueue(t, q, taskqueues.TypeFail, fmt.Sprintf(`{"message": "boom %d from the browser test"}`, i))
	}
	s.eventually(t, 10*time.Second, "the tasks failed once", func() bool { return len(s.tasksIn(t, q, tasks.StateRetry)) == 3 })

	ctx := browsertest.Chromium(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		step("count "+sel, err)
		return n
	}
	waitCount := func(what, sel string, want int) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelectorAll(%q).length === %d`, sel, want), chromedp.WithPollingTimeout(15*time.Second)))
		step(fmt.Sprintf("%s (%s: %d, want %d)", what, sel, count(sel), want), err)
	}
	step("sign in", chromedp.Do(ctx,
		chromedp.Navigate(s.URL+pages.PathTaskDashboard),
		chromedp.WaitVisible(css(`#login`)),
		chromedp.SendKeys(css(`#email`), s.Email),
		chromedp.SendKeys(css(`#password`), s.Pass),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#tab-overview`)),
		// Confirmations are answered yes.
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
	))
	row := fmt.Sprintf(`tr[data-queue=%q]`, q)
	// From the queue's retry count to its retry tasks.
	step("open the retry tasks", chromedp.Do(ctx,
		chromedp.Click(css(`nav button[data-tab="queues"]`)),
		chromedp.WaitVisible(css(row+` td[data-state="retry"] button`)),
		chromedp.Click(css(row+` td[data-state="retry"] button`)),
		chromedp.WaitVisible(css(`#tab-tasks`)),
	))
	waitCount("three retry tasks listed", `#task-list tr`, 3)
	first := fmt.Sprintf(`#task-list tr[data-task=%q]`, ids[0])
	payload, err := chromedp.Run(ctx, chromedp.Text(css(first+` td.payload`)))
	step("payload", err)
	lastErr, err := chromedp.Run(ctx, chromedp.Text(css(first+` td.lasterr`)))
	step("last error", err)
	// A retry task offers retry, archive and delete, nothing else.
	if n := count(first + ` button`); n != 3 || count(first+` button[data-action="run"]`) != 1 {
		t.Fatalf("%d actions offered on a retry task", n)
	}
	tasksShot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("screenshot", err)

	// Per task: archive the first; it leaves the retry list.
	step("archive one", chromedp.Do(ctx, chromedp.Click(css(first+` button[data-action="archive"]`))))
	waitCount("the archived task left the retry list", `#task-list tr`, 2)
	// Bulk: delete every retry task left.
	step("bulk delete", chromedp.Do(ctx,
		chromedp.WaitVisible(css(`#bulk button[data-action="bulk-delete"]`)),
		chromedp.Click(css(`#bulk button[data-action="bulk-delete"]`)),
		chromedp.WaitVisible(css(`#no-tasks`)),
	))
	notice, err := chromedp.Run(ctx, chromedp.Text(css(`#notice`)))
	step("notice", err)
	// The archived one is listed under archived, with retry offered.
	step("archived tasks", chromedp.Do(ctx,
		chromedp.Click(css(`#task-states button[data-state="archived"]`)),
		chromedp.WaitVisible(css(first+` button[data-action="run"]`)),
	))
	retryLabel, err := chromedp.Run(ctx, chromedp.Text(css(first+` button[data-action="run"]`)))
	step("retry label", err)

	step("workers", chromedp.Do(ctx,
		chromedp.Click(css(`nav button[data-tab="workers"]`)),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-worker=%q] button[data-action="stop"]`, worker))),
	))
	wrow := fmt.Sprintf(`tr[data-worker=%q]`, worker)
	starts := count(wrow + ` button[data-action="start"]`)
	workersShot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("workers screenshot", err)
	step("overview", chromedp.Do(ctx,
		chromedp.Click(css(`nav button[data-tab="overview"]`)),
		chromedp.WaitVisible(css(`#chart rect.failed`)),
	))
	// The failed attempts are in the chart while no task has failed for
	// good: the card and the chart say which they count.
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`/\b[1-9][0-9]* attempts failed\b/.test(document.getElementById("chart-sum").textContent)`, chromedp.WithPollingTimeout(10*time.Second)))
	step("chart sum", err)
	failedLabel, err := chromedp.Run(ctx, chromedp.Text(css(`#label-failed`)))
	step("failed card label", err)
	failedTasks, err := chromedp.Run(ctx, chromedp.Text(css(`#stat-failed`)))
	step("failed card", err)
	chartHeading, err := chromedp.Run(ctx, chromedp.Text(css(`#chart-heading`)))
	step("chart heading", err)
	overviewShot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	step("overview screenshot", err)
	if !strings.EqualFold(failedLabel, "Tasks failed for good") || failedTasks != "0" || !strings.HasPrefix(chartHeading, "Attempts per minute") {
		t.Fatalf("overview: card %q = %q beside chart %q: the card counts tasks, the chart attempts", failedLabel, failedTasks, chartHeading)
	}
	browsertest.Keep(t, map[string][]byte{"tasks-tab.png": tasksShot, "tasks-workers.png": workersShot, "tasks-overview.png": overviewShot})

	if payload != `{"message": "boom 0 from the browser test"}` || !strings.Contains(lastErr, "boom 0 from the browser test") {
		t.Fatalf("row shows payload %q, last error %q", payload, lastErr)
	}
	if !strings.Contains(notice, "2 task(s)") {
		t.Fatalf("bulk delete notice %q", notice)
	}
	if retryLabel != "Retry" {
		t.Fatalf("an archived task's run is labelled %q", retryLabel)
	}
	if starts != 0 {
		t.Fatal("a running worker is offered Start")
	}
	// The clicks were commands: events on the queue's stream, and the
	// statistics follow.
	if n := s.EventCount(t, tasks.QueueStream(q), tasks.TaskActionRequested{}.EventType()); n != 1 {
		t.Fatalf("%d task action events", n)
	}
	s.eventually(t, 10*time.Second, "2 deleted and 1 archived in the statistics", func() bool {
		st := s.stats(t)
		return num(st["deleted_tasks"]) == 2 && num(st["archived_tasks"]) == 1
	})
}
