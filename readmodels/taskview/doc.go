// Package taskview answers the task-queue queries: queue status (live sizes
// from Redis, cached for the dashboard's poll interval, with the pause flag
// from the task views), task statistics and recent tasks from the lifecycle
// read model, and the live workers. It owns the task tables (schema/) and
// every statement that writes them: the lifecycle step (ApplyLifecycle,
// for the lifecycle sink and its replay feed) and the queue and worker
// views (SaveQueue, SaveQueueCleared, AddQueueCleared, SaveWorkerCommand,
// for the tasks.queues projector, through Execer).
package taskview
