// Package grpcadmin serves the REST side of cfgd's gRPC monitoring: read-
// only API key views and stats (/api/grpc/api-keys/), the live gRPC server's
// health (/api/grpc/monitor/health/), the proto files (/cfg/grpc/proto-
// files/), and the staff-only admin actions that create and revoke keys
// (/admin/api-keys/).
package grpcadmin
