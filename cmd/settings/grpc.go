package settings

import (
	"github.com/cfgd/cfgd/api/grpcserver"
	"github.com/cfgd/cfgd/deploy/config"
)

func newGRPCTarget() *grpcserver.Limits {
	l := grpcserver.DefaultLimits()
	return &l
}

func grpcFields(l *grpcserver.Limits) []field {
	return []field{
		intRange(&l.MaxConcurrentStreams, "GRPC__MAX_CONCURRENT_STREAMS", "calls one connection may hold open at once; more wait for one to end", 1, 1_000_000),
		mebibytes(&l.MaxRecvMsgBytes, "GRPC__MAX_RECV_MSG_MB", "largest message the server accepts (MiB), as sent and once inflated (grpc-go stops inflating a gzip message at the limit); a larger one is refused with ResourceExhausted", 1, 1024),
		mebibytes(&l.MaxSendMsgBytes, "GRPC__MAX_SEND_MSG_MB", "largest message the server sends (MiB)", 1, 1024),
		positive(&l.KeepaliveMinTime, "GRPC__KEEPALIVE_MIN_TIME", "shortest ping interval a client may use; a client pinging faster, or with no call open, is sent GOAWAY"),
		positive(&l.KeepaliveTime, "GRPC__KEEPALIVE_TIME", "a connection quiet this long is pinged"),
		positive(&l.KeepaliveTimeout, "GRPC__KEEPALIVE_TIMEOUT", "a ping unanswered this long closes the connection"),
		positive(&l.MaxConnectionIdle, "GRPC__MAX_CONNECTION_IDLE", "a connection with no call for this long is closed"),
		positive(&l.MaxConnectionAge, "GRPC__MAX_CONNECTION_AGE", "a connection this old is sent GOAWAY (clients reconnect)"),
		positive(&l.MaxConnectionAgeGrace, "GRPC__MAX_CONNECTION_AGE_GRACE", "calls still open on a connection past its age get this long to finish"),
		positive(&l.CredentialCheck, "GRPC__CREDENTIAL_CHECK", "how often an open stream's API key or token is checked again: a revoked or expired one ends the stream (Unauthenticated) within this long"),
	}
}

// ReadGRPC reads the gRPC server's limits; problems are left in r.
func ReadGRPC(r *config.Reader) grpcserver.Limits {
	l := newGRPCTarget()
	readAll(r, grpcFields(l))
	return *l
}
