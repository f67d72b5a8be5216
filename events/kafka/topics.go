package kafka

// Topic names, before Config.TopicPrefix. The task lifecycle topic is
// tasks.TopicLifecycle (events/tasks).
const (
	// TopicEvents carries every event appended to the event store, keyed by
	// stream id so each stream stays in order within one partition.
	TopicEvents = "events"
	// TopicDeadLetters receives every event a projection gave up on, with
	// the original key, body and headers and the HeaderDead* headers.
	TopicDeadLetters = "deadletters"
	// TopicRequestLogs carries request-log events, many packed to a record:
	// they bypass the event store, the edges produce them straight here.
	TopicRequestLogs = "requestlogs"
	// TopicRequestLogsDead receives the request-log records the ClickHouse
	// sink cannot read, as TopicDeadLetters does.
	TopicRequestLogsDead = "requestlogs.dead"
	// TopicAPIKeyUsage carries the uses of API keys that cfgd itself
	// authenticated (events/apikey.UsageRecorder), counted into api_keys
	// by the usage consumer; never a caller's report.
	TopicAPIKeyUsage = "apikey.usage"
)
