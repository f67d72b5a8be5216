// Package grpcserver is cfgd's gRPC server: the standard health service,
// server reflection, and cfgd's own services (api/protos), behind
// interceptors for recovery (a panic becomes Internal and the server keeps
// serving), logging (slog) and authentication (an API key in x-api-key or a
// Bearer access token in authorization; health and reflection need neither).
// It calls the application services in commands/app and the read models in
// readmodels/.
package grpcserver
