// Package taskadmin serves the task-queue endpoints (docs/api.md, task queues) over the
// task-queue application service (commands/app/taskqueues): queue status,
// statistics, workers and recent tasks for the dashboard, and the staff's
// queue and worker commands.
package taskadmin
