// Package taskqueues is the task-queue application service on Redis (asynq):
// enqueueing with payload checks, the staff commands on queues and workers
// (appended as events, carried out by the tasks.control reactor), the live
// worker registry, and the settings the worker process shares (api/worker).
package taskqueues
