package grpcserver_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/cfgd/cfgd/api/grpcserver"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/commands/apikeys"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/projections/projectors"
)

// uses counts the uses of each API key the authenticator records.
type uses struct {
	mu sync.Mutex
	n  map[int64]int
}

func (u *uses) Record(keyID int64, _ time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n[keyID]++
}

func (u *uses) of(keyID int64) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n[keyID]
}

// Issue 28 points 3 and 5: a Report stream with an idempotency key is
// checked before anything is read (the key's form) and as each message
// arrives (the bytes a call may hold), so it is refused while still open,
// without holding the whole stream; and an open stream, its credentials
// checked again every 50 ms, is one use of its key, while a revoked key
// still ends it.
func TestReportStreams(t *testing.T) {
	t.Parallel()
	u := &uses{n: map[int64]int{}}
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true, Usage: u, CredentialCheck: 50 * time.Millisecond})
	admin := authtest.Email("streams-admin")
	e.Superuser(t, admin, "admin password 1")
	key := e.NewKey(t, "streams", apikey.TypeService, admin, nil)
	ingest := ingestv1.NewIngestServiceClient(e.Conn)
	open := func(t *testing.T, idem string) (ingestv1.IngestService_ReportClient, context.Context) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		md := []string{grpcserver.HeaderAPIKey, key.Key}
		if idem != "" {
			md = append(md, grpcserver.MetadataIdempotencyKey, idem)
		}
		stream, err := ingest.Report(metadata.AppendToOutgoingContext(ctx, md...))
		if err != nil {
			t.Fatal(err)
		}
		return stream, ctx
	}
	// ended is the status the server ended an open stream with: the
	// client has not closed its side, so only the server ends it.
	ended := func(stream ingestv1.IngestService_ReportClient) error {
		return stream.RecvMsg(new(ingestv1.ReportResponse))
	}
	one := &ingestv1.ReportRequest{Events: []*ingestv1.Event{{ServiceName: "ext.Streams", MethodName: "M", GrpcStatusCode: "OK"}}}

	t.Run("a malformed key is refused at the first message", func(t *testing.T) {
		stream, _ := open(t, "has space")
		if err := stream.Send(one); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if err := ended(stream); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Idempotency-Key") {
			t.Fatalf("%v, want InvalidArgument naming the key", err)
		}
	})

	t.Run("a keyed stream over the byte bound is refused before it ends", func(t *testing.T) {
		stream, _ := open(t, "big-stream")
		big := &ingestv1.ReportRequest{Events: []*ingestv1.Event{{ServiceName: "ext.Streams", MethodName: "M", GrpcStatusCode: "OK",
			ErrorMessage: strings.Repeat("x", 3_900_000)}}}
		sent := 0
		for range 100 {
			if err := stream.Send(big); err != nil {
				break // the server ended the stream
			}
			sent++
		}
		err := ended(stream)
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bytes") {
			t.Fatalf("after %d messages: %v, want InvalidArgument naming the bytes", sent, err)
		}
		// 8 MiB hold two such messages; the third is refused (the client
		// may have queued a few more before it heard).
		if want := requestlog.MaxKeyedBytes / 3_900_000; sent < want+1 || sent > want+5 {
			t.Fatalf("%d messages sent, want the stream refused at message %d", sent, want+1)
		}
	})

	t.Run("a keyed stream within the bounds is accepted", func(t *testing.T) {
		stream, _ := open(t, "small-stream")
		for range 3 {
			if err := stream.Send(one); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := stream.CloseAndRecv(); err != nil || res.Accepted != 3 {
			t.Fatalf("%+v %v", res, err)
		}
	})

	t.Run("an open stream is one use, and a revoked key ends it", func(t *testing.T) {
		before := u.of(key.State.ID)
		stream, ctx := open(t, "")
		if err := stream.Send(one); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // about 20 checks of the key
		if n := u.of(key.State.ID) - before; n != 1 {
			t.Fatalf("an open stream counted %d uses, want 1", n)
		}
		if _, err := e.Revoke.Handle(ctx, apikeys.Revoke{ID: key.State.ID, RevokedBy: "test"}); err != nil {
			t.Fatal(err)
		}
		e.WaitProjected(t, projectors.KeysName, apikey.Stream(key.State.ID))
		if err := ended(stream); code(err) != codes.Unauthenticated {
			t.Fatalf("revoked key: %v, want Unauthenticated", err)
		}
		if n := u.of(key.State.ID) - before; n != 1 {
			t.Fatalf("the stream counted %d uses, want 1", n)
		}
	})
}
