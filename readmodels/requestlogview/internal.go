package requestlogview

import (
	"slices"
	"strings"
	"time"
)

// internalServices are the gRPC services of cfgd's own plumbing that its
// reporting interceptor logs like any other call (api/grpcserver): health
// checks from load balancers and server reflection from tools. The
// monitoring page hides them unless asked, so they do not drown the
// traffic people look for.
var internalServices = [...]string{
	"grpc.health.v1.Health",
	"grpc.reflection.v1.ServerReflection",
	"grpc.reflection.v1alpha.ServerReflection",
}

// InternalServices are the services include_internal=false leaves out.
func InternalServices() []string { return slices.Clone(internalServices[:]) }

// notInternal is the condition that leaves out internalServices, with its
// arguments.
func notInternal() (string, []any) {
	args := make([]any, len(internalServices))
	for i, s := range internalServices {
		args[i] = s
	}
	return "service_name NOT IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ") + ")", args
}

// windowStart is the first second of the last hours hours in whole
// minutes, the current minute included: the start of window(now, hours).
func windowStart(now time.Time, hours int) time.Time {
	return windowEnd(now).Add(-time.Duration(hours) * time.Hour)
}

// windowEnd is the end (exclusive) of the current minute.
func windowEnd(now time.Time) time.Time {
	return now.UTC().Truncate(time.Minute).Add(time.Minute)
}
