package requestlog

import (
	"strconv"
	"strings"
)

// codeNames are the canonical names of the gRPC status codes (as in
// grpc's status.proto and every other language), indexed by code.
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// goCodeNames are Go's names of the same codes (codes.Code.String()),
// which cfgd stored before it stored the canonical ones.
var goCodeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

// ParseCode reads a gRPC status code in any spelling a client uses: the
// canonical name ("DEADLINE_EXCEEDED"), Go's name ("DeadlineExceeded") or
// the number ("4"). It returns the code's canonical name.
func ParseCode(s string) (string, bool) {
	// Digits only before ParseUint: a name failed it with an error it
	// allocated, for every event decoded (8% of a replay's CPU).
	if digits(s) {
		if n, err := strconv.ParseUint(s, 10, 8); err == nil && n < uint64(len(codeNames)) {
			return codeNames[n], true
		}
		return "", false
	}
	for i := range codeNames {
		if s == codeNames[i] || s == goCodeNames[i] {
			return codeNames[i], true
		}
	}
	return "", false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// CanonicalCode is ParseCode's name of s, or s unchanged when it is no
// code: what a reader answers for a stored row, whatever spelling wrote it.
func CanonicalCode(s string) string {
	if c, ok := ParseCode(s); ok {
		return c
	}
	return s
}

// CodeSpellings returns every spelling rows may hold for the code s names
// (canonical first), for a filter over stored rows; nil when s is no code.
func CodeSpellings(s string) []string {
	c, ok := ParseCode(s)
	if !ok {
		return nil
	}
	for i := range codeNames {
		if codeNames[i] == c {
			if goCodeNames[i] == c {
				return []string{c}
			}
			return []string{c, goCodeNames[i]}
		}
	}
	return nil
}

// codeHint lists the accepted spellings for an error message.
const codeHint = "a gRPC status code: its name (DEADLINE_EXCEEDED), Go's name (DeadlineExceeded) or its number (4)"

// ValidCode reports whether s is a gRPC status code in any spelling
// ParseCode accepts.
func ValidCode(s string) bool {
	_, ok := ParseCode(s)
	return ok
}

// CodeName returns the canonical name of gRPC code c ("CODE_99" for an
// unknown one), so an interceptor can fill GRPCStatusCode without
// importing grpc here.
func CodeName(c uint32) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE_" + strconv.FormatUint(uint64(c), 10)
}

// StatusFromCode maps a gRPC status code (any spelling) to a request
// status: OK is success, DEADLINE_EXCEEDED timeout, CANCELLED cancelled,
// anything else an error.
func StatusFromCode(name string) string {
	switch CanonicalCode(strings.TrimSpace(name)) {
	case "OK":
		return StatusSuccess
	case "DEADLINE_EXCEEDED":
		return StatusTimeout
	case "CANCELLED":
		return StatusCancelled
	default:
		return StatusError
	}
}
