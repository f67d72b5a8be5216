package requestlog

import (
	"net/netip"
	"strings"
	"time"

	"github.com/cfgd/cfgd/deploy/clip"
)

// Call is what an interceptor knows of one finished gRPC call.
type Call struct {
	// FullMethod is grpc's "/package.Service/Method".
	FullMethod string
	// Code is the gRPC status code (codes.Code) and Message its text.
	Code    uint32
	Message string
	Start   time.Time
	End     time.Time
	// Peer is the remote address ("10.0.0.1:5000"); its IP is kept.
	Peer      string
	RequestID string
}

// SplitMethod splits "/package.Service/Method" into service and method.
func SplitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// FromCall is the event of c, without a principal; the caller fills the
// user and API key fields it knows. Strings are cut to their limits so an
// event built here always passes Check.
func FromCall(c Call) Event {
	svc, m := SplitMethod(c.FullMethod)
	code := CodeName(c.Code)
	e := Event{
		RequestID:      Clean(c.RequestID, MaxRequestID),
		ServiceName:    Clean(svc, MaxServiceName),
		MethodName:     Clean(m, MaxMethodName),
		Status:         StatusFromCode(code),
		GRPCStatusCode: code,
		DurationMS:     min(max(c.End.Sub(c.Start).Milliseconds(), 0), MaxDurationMS),
		CreatedAt:      c.Start.UTC(),
	}
	if c.Code != 0 {
		e.ErrorMessage = Clean(c.Message, MaxErrorMessage)
	}
	if ap, err := netip.ParseAddrPort(c.Peer); err == nil {
		e.ClientIP = ap.Addr().Unmap().String()
	} else if a, err := netip.ParseAddr(c.Peer); err == nil {
		e.ClientIP = a.Unmap().String()
	}
	return e
}

// Clean makes s a string Check takes for a field of max bytes: invalid
// UTF-8 (a caller's x-request-id is any bytes) becomes U+FFFD, then it is
// cut to max. An edge that builds events itself cleans each field, so one
// caller's bytes cannot make a whole packed record undecodable.
func Clean(s string, max int) string { return clip.To(s, max) }
