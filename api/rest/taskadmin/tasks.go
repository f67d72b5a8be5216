package taskadmin

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/api/rest/auth"
	"github.com/cfgd/cfgd/commands/app/taskqueues"
	"github.com/cfgd/cfgd/deploy/errcode"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/tasks"
	"github.com/cfgd/cfgd/readmodels/taskview"
)

// Paths.
const (
	PathQueueStatus    = "/api/tasks/queue-status/"
	PathTaskStatistics = "/api/tasks/task-statistics/"
	PathWorkers        = "/api/tasks/workers/"
	PathRecent         = "/api/tasks/recent/"
	PathQueueManage    = "/api/tasks/queue-manage/"
	PathWorkerManage   = "/api/tasks/worker-manage/"
	PathTasks          = "/api/tasks/tasks/"
	PathTask           = "/api/tasks/task/"
	PathTaskManage     = "/api/tasks/task-manage/"
	PathBulkManage     = "/api/tasks/bulk-manage/"
	PathHistory        = "/api/tasks/history/"
)

// RecentLimit bounds the recent-tasks list (?limit=, default 50).
const RecentLimit = 200

// Mount adds the endpoints behind staff.
func Mount(r *mux.Router, staff mux.MiddlewareFunc, app *taskqueues.App) {
	h := &handler{app: app}
	get := []string{http.MethodGet, http.MethodHead}
	r.Handle(PathQueueStatus, staff(http.HandlerFunc(h.queueStatus))).Methods(get...).Name("tasks:queue-status")
	r.Handle(PathTaskStatistics, staff(http.HandlerFunc(h.statistics))).Methods(get...).Name("tasks:task-statistics")
	r.Handle(PathWorkers, staff(http.HandlerFunc(h.workers))).Methods(get...).Name("tasks:workers")
	r.Handle(PathRecent, staff(http.HandlerFunc(h.recent))).Methods(get...).Name("tasks:recent")
	r.Handle(PathQueueManage, staff(http.HandlerFunc(h.queueManage))).Methods(http.MethodPost).Name("tasks:queue-manage")
	r.Handle(PathWorkerManage, staff(http.HandlerFunc(h.workerManage))).Methods(http.MethodPost).Name("tasks:worker-manage")
	r.Handle(PathTasks, staff(http.HandlerFunc(h.tasks))).Methods(get...).Name("tasks:tasks")
	r.Handle(PathTask, staff(http.HandlerFunc(h.task))).Methods(get...).Name("tasks:task")
	r.Handle(PathHistory, staff(http.HandlerFunc(h.history))).Methods(get...).Name("tasks:history")
	r.Handle(PathTaskManage, staff(http.HandlerFunc(h.taskManage))).Methods(http.MethodPost).Name("tasks:task-manage")
	r.Handle(PathBulkManage, staff(http.HandlerFunc(h.bulkManage))).Methods(http.MethodPost).Name("tasks:bulk-manage")
}

type handler struct {
	app *taskqueues.App
}

// QueueStatusResponse is the queue-status answer (docs/openapi.yaml).
type QueueStatusResponse struct {
	Success bool             `json:"success"`
	Queues  []taskview.Queue `json:"queues"`
}

func (h *handler) queueStatus(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	read := h.app.Reader.QueueStatus
	switch q.Get("all") {
	case "", "false":
	case "true":
		read = h.app.Reader.QueueStatusAll
	default:
		rest.WriteError(w, errcode.Fields(map[string]string{"all": "must be true or false"}))
		return
	}
	qs, err := read(r.Context())
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, QueueStatusResponse{Success: true, Queues: qs})
}

// StatisticsResponse is the task-statistics answer (docs/openapi.yaml).
type StatisticsResponse struct {
	Success bool `json:"success"`
	taskview.Statistics
}

func (h *handler) statistics(w http.ResponseWriter, r *http.Request) {
	s, err := h.app.Reader.Stats(r.Context())
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, StatisticsResponse{Success: true, Statistics: s})
}

// WorkersResponse lists the live workers.
type WorkersResponse struct {
	Success bool              `json:"success"`
	Workers []taskview.Worker `json:"workers"`
}

func (h *handler) workers(w http.ResponseWriter, r *http.Request) {
	ws, err := h.app.Reader.Workers(r.Context())
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, WorkersResponse{Success: true, Workers: ws})
}

// RecentResponse lists recently changed tasks.
type RecentResponse struct {
	Success bool            `json:"success"`
	Tasks   []taskview.Task `json:"tasks"`
}

func (h *handler) recent(w http.ResponseWriter, r *http.Request) {
	q, ok := rest.QueryOr400(w, r)
	if !ok {
		return
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > RecentLimit {
			rest.WriteError(w, errcode.Fields(map[string]string{"limit": "must be an integer from 1 to " + strconv.Itoa(RecentLimit)}))
			return
		}
		limit = n
	}
	ts, err := h.app.Reader.Recent(r.Context(), limit)
	if err != nil {
		rest.Fail(w, r, err)
		return
	}
	rest.JSON(w, http.StatusOK, RecentResponse{Success: true, Tasks: ts})
}

type queueManageBody struct {
	Action    *string `json:"action"`
	QueueName *string `json:"queue_name"`
}

type workerManageBody struct {
	Action   *string `json:"action"`
	WorkerID *string `json:"worker_id"`
}

// QueueManageResponse is the queue's state once the command was applied.
type QueueManageResponse struct {
	Success bool           `json:"success"`
	Action  string         `json:"action"`
	Queue   taskview.Queue `json:"queue"`
}

// WorkerManageResponse is the worker's state once it carried out the
// command.
type WorkerManageResponse struct {
	Success bool              `json:"success"`
	Action  string            `json:"action"`
	Worker  tasks.WorkerState `json:"worker"`
}

// AcceptedResponse is a stored command whose effect did not show in time;
// Location (also the header) is where it will.
type AcceptedResponse struct {
	Success  bool   `json:"success"`
	Status   string `json:"status"`
	Action   string `json:"action"`
	Stream   string `json:"stream"`
	Version  int64  `json:"version"`
	Location string `json:"location"`
}

// required answers 400 naming each missing string field.
func required(w http.ResponseWriter, fields map[string]*string) bool {
	missing := map[string]string{}
	first := ""
	for _, name := range []string{"action", "queue_name", "worker_id", "task_id", "state"} {
		v, ok := fields[name]
		if !ok {
			continue
		}
		if v == nil || *v == "" {
			missing[name] = "this field is required"
			if first == "" {
				first = name
			}
		}
	}
	if len(missing) == 0 {
		return true
	}
	rest.WriteError(w, &errcode.Error{Code: errcode.Invalid, Message: first + " is required", Fields: missing})
	return false
}

func (h *handler) queueManage(w http.ResponseWriter, r *http.Request) {
	var body queueManageBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	if !required(w, map[string]*string{"action": body.Action, "queue_name": body.QueueName}) {
		return
	}
	action, queue := *body.Action, *body.QueueName
	q, ap, err := h.app.ManageQueue(r.Context(), action, queue, meta(r))
	switch {
	case err == nil:
		rest.JSON(w, http.StatusOK, QueueManageResponse{Success: true, Action: action, Queue: q})
	case errors.Is(err, taskqueues.ErrInvalidAction):
		rest.WriteError(w, errcode.New(errcode.InvalidAction, "Invalid action"))
	case errors.Is(err, taskqueues.ErrUnknownQueue):
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("queue", queue)))
	case errors.Is(err, taskqueues.ErrNotYetApplied):
		accepted(w, action, ap, PathQueueStatus)
	default:
		rest.Fail(w, r, err)
	}
}

func (h *handler) workerManage(w http.ResponseWriter, r *http.Request) {
	var body workerManageBody
	if !rest.DecodeOr400(w, r, &body) {
		return
	}
	if !required(w, map[string]*string{"action": body.Action, "worker_id": body.WorkerID}) {
		return
	}
	action, id := *body.Action, *body.WorkerID
	s, ap, err := h.app.ManageWorker(r.Context(), action, id, meta(r))
	switch {
	case err == nil:
		rest.JSON(w, http.StatusOK, WorkerManageResponse{Success: true, Action: action, Worker: s})
	case errors.Is(err, taskqueues.ErrInvalidAction):
		rest.WriteError(w, errcode.New(errcode.InvalidAction, "Invalid action"))
	case errors.Is(err, taskqueues.ErrUnknownWorker):
		rest.WriteError(w, errcode.New(errcode.NotFound, unknown("worker", id)))
	case errors.Is(err, taskqueues.ErrNotYetApplied):
		accepted(w, action, ap, PathWorkers)
	default:
		rest.Fail(w, r, err)
	}
}

// unknown names what was not found when it is a possible name, and never
// echoes arbitrary input.
func unknown(what, name string) string {
	if taskqueues.ValidName(name) {
		return "Unknown " + what + ": " + name
	}
	return "Unknown " + what
}

func accepted(w http.ResponseWriter, action string, ap taskqueues.Appended, where string) {
	w.Header().Set("Location", where)
	rest.JSON(w, http.StatusAccepted, AcceptedResponse{Success: true, Status: "accepted", Action: action, Stream: ap.Stream, Version: ap.Version, Location: where})
}

func meta(r *http.Request) events.Metadata {
	md := events.Metadata{CorrelationID: rest.RequestID(r.Context())}
	if p, ok := auth.PrincipalFrom(r.Context()); ok && p != nil {
		md.Actor = "user:" + strconv.FormatInt(p.UserID, 10)
	}
	return md
}
