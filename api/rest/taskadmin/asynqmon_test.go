package taskadmin_test

import (
	"strings"
	"testing"

	"github.com/cfgd/cfgd/api/rest/taskadmin"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
)

// asynqmon is a deep view for staff: it answers reads, and refuses every
// change (a change to a queue is a cfgd command, an event).
func TestAsynqmonIsReadOnlyBehindStaff(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	q := s.Q["default"]
	id := s.enqueue(t, q, taskqueues.TypeEcho, `{}`)
	base := taskadmin.PathAsynqmon
	if res := s.Do(t, "GET", base, nil); res.Status != 401 {
		t.Fatalf("asynqmon without credentials: %d", res.Status)
	}
	page := s.Do(t, "GET", base, nil, s.Admin...)
	if page.Status != 200 || !strings.Contains(string(page.Raw), "<html") {
		t.Fatalf("asynqmon page: %d %.200s", page.Status, page.Raw)
	}
	if res := s.Do(t, "GET", base+"api/queues/"+q, nil, s.Admin...); res.Status != 200 || !strings.Contains(string(res.Raw), q) {
		t.Fatalf("asynqmon queue: %d %.300s", res.Status, res.Raw)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", base + "api/queues/" + q + ":pause"},
		{"DELETE", base + "api/queues/" + q + "/pending_tasks/" + id},
		{"DELETE", base + "api/queues/" + q + "/pending_tasks:delete_all"},
	} {
		if res := s.Do(t, c.method, c.path, nil, s.Admin...); res.Status != 405 || res.Str("code") != "method_not_allowed" {
			t.Fatalf("%s %s: %d %s", c.method, c.path, res.Status, res.Raw)
		}
	}
	if info, err := s.App.Inspector.GetTaskInfo(q, id); err != nil || info.State.String() != "pending" {
		t.Fatalf("the task after refused changes: %v %v", info, err)
	}
	if paused, _ := s.App.Inspector.GetQueueInfo(q); paused == nil || paused.Paused {
		t.Fatalf("queue paused through asynqmon: %v", paused)
	}
}
