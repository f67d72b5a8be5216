// Package reactors holds the reactors: projections with side effects that
// never re-run on replay. tasks.control carries out the staff's queue and
// worker commands (asynq's inspector for queues, the worker registry for
// workers) and records the lifecycle of the tasks a clear removed.
package reactors
