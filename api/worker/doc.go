// Package worker is the task worker process (cfgd worker): asynq servers
// over the configured queues, cfgd's task handlers, a heartbeat in the
// worker registry, the start/stop/restart commands addressed to this worker,
// and the lifecycle records it emits to Kafka.
package worker
