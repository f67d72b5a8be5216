package events

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// SchemaLevel is the schema level of this build: one number over every
// event type, payload version and Kafka record format cfgd reads or
// writes. It goes up by one whenever a type is added or a payload or
// record format gets a new version; events/corpus's test fails until it
// does. Every record carries the level of the build that wrote it
// (HeaderSchemaLevel), so a reader can tell a type it has never heard of
// that a newer build wrote (it may concern the reader: wait for a newer
// cfgd) from one no build of its level or below knows.
const SchemaLevel = 1

// Record headers of the schema: the writer's SchemaLevel, and the version
// of the record's shape (a payload's SchemaVersion, a record format's).
const (
	HeaderSchemaLevel   = "schema_level"
	HeaderSchemaVersion = "schema_version"
)

// Versioned is implemented by a payload whose shape changed: its current
// version (2 or more; a payload without the method is at version 1).
type Versioned interface {
	SchemaVersion() int
}

// Upcaster turns a payload of one version into the next version's JSON.
// It is a pure function of the stored bytes.
type Upcaster func(data json.RawMessage) (json.RawMessage, error)

// Upcasting is implemented by a Versioned payload: Upcasters()[i] turns
// version i+1 into version i+2, so readers always see the current shape
// whatever version a stored event has.
type Upcasting interface {
	Upcasters() []Upcaster
}

// VersionOf is the current schema version of e's type.
func VersionOf(e Event) int {
	if v, ok := e.(Versioned); ok && v.SchemaVersion() > 1 {
		return v.SchemaVersion()
	}
	return 1
}

// ErrNewerSchema reports a record this build cannot fully understand: a
// newer version of a type it reads, or a type it has never heard of that a
// build of a higher schema level wrote. Its reader must not skip it, nor
// dead-letter it, nor move past it: it waits for a newer cfgd to take it.
type ErrNewerSchema struct {
	Type    string
	Version int
}

func (e *ErrNewerSchema) Error() string {
	return fmt.Sprintf("waiting for a newer cfgd: %s v%d", e.Type, e.Version)
}

// CheckFormat is the check of a Kafka record format (not an envelope):
// version is the record's, current this build's.
func CheckFormat(format string, version, current int) error {
	if version > current {
		return &ErrNewerSchema{Type: format, Version: version}
	}
	return nil
}

// SchemaHeaders are the schema headers of a record of shape version v
// written by this build.
func SchemaHeaders(v int) map[string]string {
	return map[string]string{HeaderSchemaLevel: strconv.Itoa(SchemaLevel), HeaderSchemaVersion: strconv.Itoa(max(v, 1))}
}

// ParseSchemaHeader reads a schema header's value; a record written before
// records carried it (empty) is at 1, and so is a value that is no
// positive number (the signature, not this header, vouches for a record).
func ParseSchemaHeader(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}
