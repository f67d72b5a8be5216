// Package tasks holds the events of task-queue management and the task
// lifecycle record.
//
// Domain events (stored in the Postgres event store, relayed to the events
// topic) are the staff's commands on queues and workers:
//
//	queue-<name>   QueuePaused, QueueResumed, QueueCleared, QueueClearApplied
//	               TaskActionRequested, TasksBulkRequested, TasksBulkApplied
//	worker-<id>    WorkerStartRequested, WorkerStopRequested, WorkerRestartRequested
//
// Lifecycle records (enqueued, started, succeeded, failed, retried) are
// telemetry: workers produce them straight to their own Kafka topic
// (TopicLifecycle), never through the event store, because there is one or
// more per task run.
package tasks

import (
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/events"
)

// Queue actions, as the API names them.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionClear  = "clear"
)

// Worker actions, as the API names them.
const (
	ActionStart   = "start"
	ActionStop    = "stop"
	ActionRestart = "restart"
)

// QueuePaused: staff asked that workers stop taking tasks from Queue.
type QueuePaused struct {
	Queue string    `json:"queue"`
	At    time.Time `json:"at"`
}

func (QueuePaused) EventType() string { return "queue.paused" }

// QueueResumed: staff asked that workers take tasks from Queue again.
type QueueResumed struct {
	Queue string    `json:"queue"`
	At    time.Time `json:"at"`
}

func (QueueResumed) EventType() string { return "queue.resumed" }

// QueueCleared: staff asked that every waiting task of Queue (pending,
// scheduled, retry) be removed. Running tasks finish; the pause flag stays.
type QueueCleared struct {
	Queue string    `json:"queue"`
	At    time.Time `json:"at"`
}

func (QueueCleared) EventType() string { return "queue.cleared" }

// QueueClearApplied: the tasks.control reactor carried out the clear of
// Queue and removed Removed waiting tasks. Only the reactor knows that
// number; recording it as an event makes the queue view a pure function
// of the log, so a replay rebuilds it. Its event id derives from the
// QueueCleared one (ClearAppliedID), so a redelivered clear finds it and
// neither clears nor appends again.
type QueueClearApplied struct {
	Queue   string    `json:"queue"`
	Removed int       `json:"removed"`
	At      time.Time `json:"at"`
}

func (QueueClearApplied) EventType() string { return "queue.clear_applied" }

// clearAppliedSpace is the UUID namespace of ClearAppliedID.
var clearAppliedSpace = uuid.MustParse("6f1d9b3e-2c4a-5e8f-9a7b-0c1d2e3f4a5b")

// ClearAppliedID is the event id of the QueueClearApplied that answers the
// QueueCleared event cleared.
func ClearAppliedID(cleared uuid.UUID) uuid.UUID { return uuid.NewSHA1(clearAppliedSpace, cleared[:]) }

// WorkerStartRequested: the worker process WorkerID should run its task
// servers (again).
type WorkerStartRequested struct {
	WorkerID string    `json:"worker_id"`
	At       time.Time `json:"at"`
}

func (WorkerStartRequested) EventType() string { return "worker.start_requested" }

// WorkerStopRequested: the worker process WorkerID should stop taking
// tasks; tasks in flight finish or go back to their queue.
type WorkerStopRequested struct {
	WorkerID string    `json:"worker_id"`
	At       time.Time `json:"at"`
}

func (WorkerStopRequested) EventType() string { return "worker.stop_requested" }

// WorkerRestartRequested: stop, then start.
type WorkerRestartRequested struct {
	WorkerID string    `json:"worker_id"`
	At       time.Time `json:"at"`
}

func (WorkerRestartRequested) EventType() string { return "worker.restart_requested" }

// Task actions, as the API names them: run puts a scheduled, retry or
// archived task back to pending ("retry" is its name for a failed one);
// archive parks a waiting task; delete removes a task that is not running.
const (
	ActionRun     = "run"
	ActionRetry   = "retry"
	ActionArchive = "archive"
	ActionDelete  = "delete"
)

// Task states as asynq names them, the ones a task action or a listing
// names.
const (
	StatePending   = "pending"
	StateActive    = "active"
	StateScheduled = "scheduled"
	StateRetry     = "retry"
	StateArchived  = "archived"
	StateCompleted = "completed"
)

// TaskStates lists every state a queue's tasks are listed by.
func TaskStates() []string {
	return []string{StatePending, StateActive, StateScheduled, StateRetry, StateArchived, StateCompleted}
}

// ActionFrom lists the states from which each task action applies; any
// other pairing makes no sense (a running task is not deleted, a pending
// one not run).
func ActionFrom(action string) []string {
	switch action {
	case ActionRun, ActionRetry:
		return []string{StateScheduled, StateRetry, StateArchived}
	case ActionArchive:
		return []string{StatePending, StateScheduled, StateRetry}
	case ActionDelete:
		return []string{StatePending, StateScheduled, StateRetry, StateArchived, StateCompleted}
	}
	return nil
}

// TaskActionRequested: staff asked that Action be done to task TaskID of
// Queue, which was in State (with Retried failed attempts) when asked. It
// lives on the queue's stream, in order with pauses and clears.
type TaskActionRequested struct {
	Queue   string    `json:"queue"`
	TaskID  string    `json:"task_id"`
	Type    string    `json:"type"`
	State   string    `json:"state"`
	Retried int       `json:"retried"`
	Action  string    `json:"action"`
	At      time.Time `json:"at"`
}

func (TaskActionRequested) EventType() string { return "queue.task_action_requested" }

// TasksBulkRequested: staff asked that Action be done to every task of
// Queue in State.
type TasksBulkRequested struct {
	Queue  string    `json:"queue"`
	State  string    `json:"state"`
	Action string    `json:"action"`
	At     time.Time `json:"at"`
}

func (TasksBulkRequested) EventType() string { return "queue.tasks_bulk_requested" }

// TasksBulkApplied: the tasks.control reactor carried out a bulk action
// on Affected tasks. Like QueueClearApplied, its id derives from the
// request's (BulkAppliedID), so a redelivered request finds it and does
// not act on tasks that arrived since.
type TasksBulkApplied struct {
	Queue    string    `json:"queue"`
	State    string    `json:"state"`
	Action   string    `json:"action"`
	Affected int       `json:"affected"`
	At       time.Time `json:"at"`
}

func (TasksBulkApplied) EventType() string { return "queue.tasks_bulk_applied" }

// bulkAppliedSpace is the UUID namespace of BulkAppliedID.
var bulkAppliedSpace = uuid.MustParse("0b7e4c1a-93d2-5f6e-8a41-2d5c7e9f1b3a")

// BulkAppliedID is the event id of the TasksBulkApplied that answers the
// TasksBulkRequested event req.
func BulkAppliedID(req uuid.UUID) uuid.UUID { return uuid.NewSHA1(bulkAppliedSpace, req[:]) }

// Events returns one prototype of every task-management event, for the
// registry.
func Events() []events.Event {
	return []events.Event{
		QueuePaused{}, QueueResumed{}, QueueCleared{}, QueueClearApplied{},
		WorkerStartRequested{}, WorkerStopRequested{}, WorkerRestartRequested{},
		TaskActionRequested{}, TasksBulkRequested{}, TasksBulkApplied{},
	}
}

// QueueStream is the stream of queue name.
func QueueStream(name string) string { return "queue-" + name }

// WorkerStream is the stream of worker id.
func WorkerStream(id string) string { return "worker-" + id }

// TopicLifecycle carries Lifecycle records (before the bus topic prefix),
// keyed by task id so one task's steps stay in order.
const TopicLifecycle = "tasks.lifecycle"

// Lifecycle steps.
const (
	StepEnqueued  = "enqueued"
	StepStarted   = "started"
	StepSucceeded = "succeeded"
	// StepRetried: an attempt failed and the task will run again.
	StepRetried = "retried"
	// StepFailed: the last attempt failed; the task will not run again.
	StepFailed = "failed"
)

// LifecycleFormat names the record format of the lifecycle topic (JSON of
// Lifecycle), and LifecycleVersion is the version this build writes (its
// events.HeaderSchemaVersion).
const (
	LifecycleFormat  = "tasks.lifecycle"
	LifecycleVersion = 1
)

// Lifecycle is one step of one task. (TaskID, Step, Attempt) identifies it:
// a step produced twice is one step.
type Lifecycle struct {
	TaskID   string    `json:"task_id"`
	Queue    string    `json:"queue"`
	Type     string    `json:"type"`
	Step     string    `json:"step"`
	Attempt  int       `json:"attempt"` // 0 for enqueued, 1-based for the rest
	WorkerID string    `json:"worker_id,omitempty"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
}

// Terminal tells whether step ends a task.
func Terminal(step string) bool { return step == StepSucceeded || step == StepFailed }

// Worker states.
const (
	WorkerRunning = "running"
	WorkerStopped = "stopped"
)

// WorkerState is what a worker process reports in each heartbeat.
type WorkerState struct {
	WorkerID    string    `json:"worker_id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	State       string    `json:"state"`
	Queues      []string  `json:"queues"`
	Processes   int       `json:"processes"`
	Threads     int       `json:"threads"`
	Active      int64     `json:"active"` // tasks running now
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// AppliedSeq is the worker stream version of the last command carried
	// out.
	AppliedSeq int64 `json:"applied_seq"`
	Restarts   int   `json:"restarts"`
}

// StepCleared closes a task that a clear removed before it ran.
const StepCleared = "cleared"

// StepDeleted closes a task that staff deleted; StepArchived parks one
// that staff archived (its Attempt is the failed attempts so far, so a
// later run of it ranks above).
const (
	StepDeleted  = "deleted"
	StepArchived = "archived"
)

// ControlReactor is the name of the reactor that carries out queue and
// worker commands (projections/reactors); a command's caller waits for its
// checkpoint to know the command was carried out. Never rename it: it is
// a consumer group and a checkpoint key.
const ControlReactor = "tasks.control"
