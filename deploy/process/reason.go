package process

import (
	"context"
	"errors"
)

// Reason is why a readiness check fails, as /readyz shows it: a word from
// a fixed vocabulary, never an error's text (which may name hosts, tables
// or settings, and /readyz answers without credentials). The error itself
// goes to the log.
type Reason string

// The vocabulary. docs/operations.md lists each with what to do.
const (
	// Unreachable: a dependency does not answer or answers with an error
	// (the reason of every error that carries no other).
	Unreachable Reason = "unreachable"
	// Timeout: the check gave no answer within /readyz's time.
	Timeout Reason = "timeout"
	// Starting: the runner has not reached its work yet.
	Starting Reason = "starting"
	// Fenced: another process joined the consumer group with this
	// replica's id (two replicas share a REPLICA__ID).
	Fenced Reason = "fenced"
	// TablesMissing: the request-log tables are not there yet.
	TablesMissing Reason = "tables_missing"
	// ViewsMissing: the request-log views are missing, as a replay killed
	// inside its swap leaves them.
	ViewsMissing Reason = "views_missing"
	// TopicRecreated: a topic was deleted and created again; the consumer
	// counts the new one from its start (until its first batch is in).
	TopicRecreated Reason = "topic_recreated"
	// ClickHouseProfile: on a ClickHouse cluster, cfgd's user profile lacks
	// load_balancing in_order, and the sink refuses to write.
	ClickHouseProfile Reason = "clickhouse_profile"
	// CheckpointAhead: the relay's checkpoint is ahead of the database
	// cluster's transaction ids (a database restored into a new cluster).
	CheckpointAhead Reason = "checkpoint_ahead"
)

// Reasons lists the vocabulary.
func Reasons() []Reason {
	return []Reason{Unreachable, Timeout, Starting, Fenced, TablesMissing, ViewsMissing, TopicRecreated, ClickHouseProfile, CheckpointAhead}
}

// Command is what an operator runs about r, when one command does it.
func (r Reason) Command() string {
	switch r {
	case TablesMissing:
		return "cfgd migrate"
	case ViewsMissing:
		return "cfgd replay requestlog.clickhouse"
	}
	return ""
}

// Fix says in a few words what to do about r when no single command does
// it; fixed text, like the reason.
func (r Reason) Fix() string {
	switch r {
	case Fenced:
		return "give every replica its own REPLICA__ID"
	case ClickHouseProfile:
		return "set <load_balancing>in_order</load_balancing> in the profile of cfgd's ClickHouse user"
	case CheckpointAhead:
		return "reset relay_checkpoints (docs/operations.md)"
	}
	return ""
}

// NotReady marks err with reason r for /readyz; its text stays the
// error's, for the log.
func NotReady(r Reason, err error) error {
	if err == nil {
		return nil
	}
	return &notReady{reason: r, err: err}
}

type notReady struct {
	reason Reason
	err    error
}

func (e *notReady) Error() string { return e.err.Error() }
func (e *notReady) Unwrap() error { return e.err }

// ReasonOf is the reason /readyz gives for a failed check's err: the one
// NotReady marked it with, Timeout for a deadline, else Unreachable.
func ReasonOf(err error) Reason {
	var nr *notReady
	switch {
	case errors.As(err, &nr):
		return nr.reason
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Unreachable
}
