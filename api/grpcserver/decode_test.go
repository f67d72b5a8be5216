package grpcserver_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/cfgd/cfgd/api/grpcserver"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
)

// A unary call is authenticated before its request is decoded: the
// generated handler (which decodes, then calls the interceptors) runs
// only for a caller the interceptors let through, so a caller without
// credentials cannot make cfgd decode anything. Counted here on a real
// generated service whose decoding is observed.
func TestUnaryRequestIsDecodedAfterAuthentication(t *testing.T) {
	t.Parallel()
	var decoded atomic.Int64
	desc := apikeysv1.APIKeyService_ServiceDesc
	desc.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i, m := range desc.Methods {
		h := m.Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, chain grpc.UnaryServerInterceptor) (any, error) {
			counted := func(v any) error { decoded.Add(1); return dec(v) }
			return h(srv, ctx, counted, chain)
		}
	}
	srv, err := grpcserver.New(grpcserver.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}, slogTo(&grpctest.Logs{}), anyone{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Register(&desc, apikeysv1.UnimplementedAPIKeyServiceServer{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := apikeysv1.NewAPIKeyServiceClient(dial(t, <-srv.Started()))

	if _, err := c.List(context.Background(), &apikeysv1.ListRequest{Page: 2}); code(err) != codes.Unauthenticated {
		t.Fatalf("without credentials: %v, want Unauthenticated", err)
	}
	if n := decoded.Load(); n != 0 {
		t.Fatalf("the request of a caller without credentials was decoded (%d times)", n)
	}
	if _, err := c.List(withKey("any"), &apikeysv1.ListRequest{Page: 2}); code(err) != codes.Unimplemented {
		t.Fatalf("with a key: %v, want the service's Unimplemented", err)
	}
	if n := decoded.Load(); n != 1 {
		t.Fatalf("the request of an authenticated caller was decoded %d times, want once", n)
	}
}
