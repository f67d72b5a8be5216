package taskadmin

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// TasksResponse is one page of a queue's tasks in one state, as asynq
// holds them now.
type TasksResponse struct {
	Success bool                `json:"success"`
	Queue   string              `json:"queue"`
	State   string              `json:"state"`
	Page    int                 `json:"page"`
	Size    int                 `json:"size"`
	Tasks   []taskview.TaskInfo `json:"tasks"`
}

// intParam reads an optional integer query parameter in [lo, hi].
func intParam(q url.Values, name string, def, lo, hi int, bad map[string]string) int {
	v := q.Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		bad[name] = "must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi)
	}
	return n
}

func checkState(state string, bad map[string]string) {
	if !slices.Contains(tasks.TaskStates(), state) {
		bad["state"] = "must be one of " + strings.Join(tasks.TaskStates(), ", ")
	}
}

func (h *handler) tasks(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	bad := map[string]string{}
	queue, state := q.Get("queue"), q.Get("state")
	if !taskqueues.ValidName(queue) {
		bad["queue"] = "a queue name is required"
	}
	checkState(state, bad)
	page := intParam(q, "page", 1, 1, 1_000_000, bad)
	size := intParam(q, "size", 20, 1, taskview.MaxTasksPage, bad)
	if len(bad) > 0 {
		rest.WriteError(w, errcode.Fields(bad))
		return
	}
	ts, err := h.app.Reader.Tasks(queue, state, page, size)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, TasksResponse{Success: true, Queue: queue, State: state, Page: page, Size: size, Tasks: ts})
}

// TaskResponse is one task as asynq holds it now; Task is null once a
// delete removed it.
type TaskResponse struct {
	Success bool               `json:"success"`
	Action  string             `json:"action,omitempty"`
	Task    *taskview.TaskInfo `json:"task"`
}

func (h *handler) task(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	id, queue := q.Get("id"), q.Get("queue")
	bad := map[string]string{}
	if !taskqueues.ValidName(id) {
		bad["id"] = "a task id is required"
	}
	if queue != "" && !taskqueues.ValidName(queue) {
		bad["queue"] = "not a queue name"
	}
	if len(bad) > 0 {
		rest.WriteError(w, errcode.Fields(bad))
		return
	}
	t, err := h.app.Reader.Task(r.Context(), queue, id)
	switch {
	case errors.Is(err, taskview.ErrTaskNotFound):
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("task", id)))
	case err != nil:
		rest.Fail(w, r, err)
	default:
		rest.JSON(w, http.StatusOK, TaskResponse{Success: true, Task: &t})
	}
}

// HistoryResponse counts task attempts per minute.
type HistoryResponse struct {
	Success bool             `json:"success"`
	Minutes int              `json:"minutes"`
	Points  []taskview.Point `json:"points"`
}

func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	bad := map[string]string{}
	minutes := intParam(q, "minutes", 60, 1, taskview.MaxHistory, bad)
	if len(bad) > 0 {
		rest.WriteError(w, errcode.Fields(bad))
		return
	}
	ps, err := h.app.Reader.History(r.Context(), minutes)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, HistoryResponse{Success: true, Minutes: minutes, Points: ps})
}

type taskManageBody struct {
	Action    *string `json:"action"`
	TaskID    *string `json:"task_id"`
	QueueName *string `json:"queue_name"`
}

func (h *handler) taskManage(w http.ResponseWriter, r *http.Request) {
	var body taskManageBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	if !required(w, map[string]*string{"action": body.Action, "task_id": body.TaskID}) {
		return
	}
	action, id, queue := *body.Action, *body.TaskID, ""
	if body.QueueName != nil {
		queue = *body.QueueName
	}
	if !slices.Contains([]string{tasks.ActionRun, tasks.ActionRetry, tasks.ActionArchive, tasks.ActionDelete}, action) {
		rest.WriteError(w, errcode.New(errcode.InvalidAction, "Invalid action"))
		return
	}
	if !taskqueues.ValidName(id) || (queue != "" && !taskqueues.ValidName(queue)) {
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("task", id)))
		return
	}
	res, ap, err := h.app.ManageTask(r.Context(), action, queue, id, meta(r))
	var na *taskqueues.NotApplicableError
	switch {
	case err == nil:
		rest.JSON(w, http.StatusOK, TaskResponse{Success: true, Action: action, Task: res.Task})
	case errors.As(err, &na):
		rest.WriteError(w, errcode.New(errcode.InvalidAction, na.Error()))
	case errors.Is(err, taskview.ErrTaskNotFound):
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("task", id)))
	case errors.Is(err, taskqueues.ErrNotYetApplied):
		accepted(w, action, ap, PathTask+"?id="+id)
	default:
		rest.Fail(w, r, err)
	}
}

type bulkManageBody struct {
	Action    *string `json:"action"`
	QueueName *string `json:"queue_name"`
	State     *string `json:"state"`
}

// BulkManageResponse counts the tasks a bulk action changed.
type BulkManageResponse struct {
	Success  bool   `json:"success"`
	Action   string `json:"action"`
	Queue    string `json:"queue_name"`
	State    string `json:"state"`
	Affected int    `json:"affected"`
}

func (h *handler) bulkManage(w http.ResponseWriter, r *http.Request) {
	var body bulkManageBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	if !required(w, map[string]*string{"action": body.Action, "queue_name": body.QueueName, "state": body.State}) {
		return
	}
	action, queue, state := *body.Action, *body.QueueName, *body.State
	bad := map[string]string{}
	checkState(state, bad)
	if len(bad) > 0 {
		rest.WriteError(w, errcode.Fields(bad))
		return
	}
	res, ap, err := h.app.ManageTasks(r.Context(), action, queue, state, meta(r))
	var na *taskqueues.NotApplicableError
	switch {
	case err == nil:
		rest.JSON(w, http.StatusOK, BulkManageResponse{Success: true, Action: action, Queue: queue, State: state, Affected: res.Affected})
	case errors.Is(err, taskqueues.ErrInvalidAction):
		rest.WriteError(w, errcode.New(errcode.InvalidAction, "Invalid action"))
	case errors.As(err, &na):
		rest.WriteError(w, errcode.New(errcode.InvalidAction, na.Error()))
	case errors.Is(err, taskqueues.ErrUnknownQueue):
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("queue", queue)))
	case errors.Is(err, taskqueues.ErrNotYetApplied):
		accepted(w, action, ap, PathTasks+"?queue="+queue+"&state="+state)
	default:
		rest.Fail(w, r, err)
	}
}
