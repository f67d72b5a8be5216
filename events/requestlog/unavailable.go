package requestlog

import "errors"

// ErrUnavailable is what a producer's error wraps when Kafka did not take
// the events in time (events/requestlogkafka); edges answer 503 /
// Unavailable.
var ErrUnavailable = errors.New("request-log topic is unavailable")
