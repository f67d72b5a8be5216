package grpcserver

import (
	"context"

	"google.golang.org/grpc"
)

// decodeLate returns desc with every unary handler changed to run the
// interceptor chain (metrics, logging, recovery, authentication) first
// and decode the request last, inside the chain's final handler.
//
// A generated handler calls dec, which unmarshals the request, before
// it hands the call to the interceptors; the authentication interceptor
// then refuses a caller without credentials only after its message was
// decoded, however costly that was (millions of elements from a few
// kilobytes of gzip). Streams need no change: their interceptors run
// before the handler receives anything.
//
// The interceptors see a nil request: none of cfgd's reads it.
func decodeLate(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		handler, info := m.Handler, &grpc.UnaryServerInfo{FullMethod: "/" + desc.ServiceName + "/" + m.MethodName}
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, chain grpc.UnaryServerInterceptor) (any, error) {
			// The generated handler, given no interceptor, decodes and
			// calls the method.
			last := func(ctx context.Context, _ any) (any, error) { return handler(srv, ctx, dec, nil) }
			if chain == nil {
				return last(ctx, nil)
			}
			info := *info
			info.Server = srv
			return chain(ctx, nil, &info, last)
		}
		out.Methods[i] = m
	}
	return &out
}
