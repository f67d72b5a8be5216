package requestlog

import (
	"errors"
	"time"
)

// ErrUnavailable is what a producer's error wraps when Kafka did not take
// the events in time (events/requestlogkafka); edges answer 503 /
// Unavailable.
var ErrUnavailable = errors.New("request-log topic is unavailable")

// InDoubt is implemented by a producer's error (wrapping ErrUnavailable)
// after which some of the events may still be stored: Kafka did not
// answer in time, but the producer still holds and retries them
// (events/requestlogkafka).
type InDoubt interface {
	error
	// Settle calls f once the producer has the final result of every
	// event (lost: the indexes, into the events produced, of those not
	// stored), or with the error when that is not known within within.
	// f runs once, on a goroutine the producer's Close waits for.
	Settle(within time.Duration, f func(lost []int, err error))
}
