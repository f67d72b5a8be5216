// Package catalog lists every event type and Kafka record format cfgd
// writes: the registry serve, replay and the CLI build, and the
// compatibility corpus in testdata/corpus, one real encoded sample of
// every type at every version it ever had, which the test decodes with
// today's code forever. A change to a payload's shape adds a version and
// an upcaster beside the type (events.Upcasting); `go generate
// ./events/catalog` then adds the new version's sample (and the new
// events.SchemaLevel's line) without touching the old ones.
package catalog

//go:generate go test -run ^TestCorpus$ . -args -corpus.write

import (
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/identity"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/tasks"
)

// Events are the prototypes of every domain event type.
func Events() []events.Event {
	var all []events.Event
	all = append(all, identity.Events()...)
	all = append(all, apikey.Events()...)
	all = append(all, tasks.Events()...)
	return all
}

// Format is a Kafka record format other than the domain envelope, at the
// version this build writes.
type Format struct {
	Name    string
	Version int
}

// Formats are the record formats of the request-log, API-key usage and
// task lifecycle topics.
func Formats() []Format {
	return []Format{
		{requestlog.BatchFormat, requestlog.BatchVersion},
		{apikey.UsesFormat, apikey.UsesVersion},
		{tasks.LifecycleFormat, tasks.LifecycleVersion},
	}
}
