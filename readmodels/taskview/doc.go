// Package taskview answers the task-queue queries: queue status (live sizes
// from Redis, cached for the dashboard's poll interval, with the pause flag
// from the task views), task statistics and recent tasks from the lifecycle
// read model, and the live workers. It owns the lifecycle tables' write
// statement, which the lifecycle sink and the reactor share.
package taskview
