package taskqueues

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/cfgd/cfgd/commands"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/store"
	"github.com/cfgd/cfgd/events/tasks"
)

// ErrInvalidAction is the spec's answer to an unknown action.
var ErrInvalidAction = errors.New("Invalid action")

// ErrUnknownWorker is a worker id with no live worker process.
var ErrUnknownWorker = errors.New("unknown worker")

// Manager handles the staff's queue and worker commands: each is one event
// appended to the queue's or worker's stream at the version read, carried
// out afterwards by the tasks.control reactor.
type Manager struct {
	db  store.DB
	cfg Config
	reg *Registry
	now func() time.Time
}

// NewManager returns the command handlers.
func NewManager(db store.DB, cfg Config, reg *Registry, now func() time.Time) *Manager {
	return &Manager{db: db, cfg: cfg, reg: reg, now: now}
}

// Appended says where a command's event landed, for read-your-writes.
type Appended struct {
	Stream  string
	Version int64
	// EventID is the appended event's id.
	EventID uuid.UUID
}

// ManageQueue appends the event of action (pause, resume, clear) on queue.
func (m *Manager) ManageQueue(ctx context.Context, action, queue string, md events.Metadata) (Appended, error) {
	now := m.now().UTC()
	var ev events.Event
	switch action {
	case tasks.ActionPause:
		ev = tasks.QueuePaused{Queue: queue, At: now}
	case tasks.ActionResume:
		ev = tasks.QueueResumed{Queue: queue, At: now}
	case tasks.ActionClear:
		ev = tasks.QueueCleared{Queue: queue, At: now}
	default:
		return Appended{}, ErrInvalidAction
	}
	if !m.cfg.HasQueue(queue) {
		return Appended{}, ErrUnknownQueue
	}
	return m.append(ctx, tasks.QueueStream(queue), ev, md, now)
}

// ManageWorker appends the event of action (start, stop, restart) for the
// live worker id.
func (m *Manager) ManageWorker(ctx context.Context, action, id string, md events.Metadata) (Appended, error) {
	now := m.now().UTC()
	var ev events.Event
	switch action {
	case tasks.ActionStart:
		ev = tasks.WorkerStartRequested{WorkerID: id, At: now}
	case tasks.ActionStop:
		ev = tasks.WorkerStopRequested{WorkerID: id, At: now}
	case tasks.ActionRestart:
		ev = tasks.WorkerRestartRequested{WorkerID: id, At: now}
	default:
		return Appended{}, ErrInvalidAction
	}
	if !ValidName(id) {
		return Appended{}, ErrUnknownWorker
	}
	s, err := m.reg.Get(ctx, id)
	if err != nil {
		return Appended{}, err
	}
	if s == nil {
		return Appended{}, ErrUnknownWorker
	}
	return m.append(ctx, tasks.WorkerStream(id), ev, md, now)
}

// append records ev on stream at the version it reads: a queue or worker
// command depends on nothing but the stream's position, so the decision is
// always "append", and a concurrent command only makes it try again.
func (m *Manager) append(ctx context.Context, stream string, ev events.Event, md events.Metadata, now time.Time) (Appended, error) {
	return commands.Execute(ctx, m.db, "append "+ev.EventType(),
		func(ctx context.Context) (int64, error) { return store.Version(ctx, m.db, stream) },
		func(_ context.Context, v int64) (commands.Decision[Appended], error) {
			env, err := events.New(stream, ev, md, now)
			if err != nil {
				return commands.Decision[Appended]{}, err
			}
			return commands.Decision[Appended]{
				Writes: []store.Write{{Stream: stream, Expected: v, Events: []events.Envelope{env}}},
				Result: Appended{Stream: stream, Version: v + 1, EventID: env.ID},
			}, nil
		})
}
