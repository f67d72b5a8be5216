package grpcserver_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cfgd/cfgd/api/grpcserver"
	apikeysv1 "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	ingestv1 "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	monitorv1 "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/api/reporter"
	"github.com/cfgd/cfgd/cmd/cfgd/authtest"
	"github.com/cfgd/cfgd/cmd/cfgd/grpctest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// waitRequests waits (a minute at most: the sink's consumer group may
// take seconds to join on a loaded machine) until the read model lists at
// least n requests matching f, and returns them.
func waitRequests(t *testing.T, e *grpctest.Env, f requestlogview.Filter, n int) []requestlogview.Request {
	t.Helper()
	f.PageSize = requestlogview.MaxPageSize
	deadline := time.Now().Add(60 * time.Second)
	for {
		rs, _, err := e.Requests.Requests(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) >= n {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests %+v: %d listed, want %d", f, len(rs), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func find(rs []requestlogview.Request, match func(requestlogview.Request) bool) (requestlogview.Request, bool) {
	i := slices.IndexFunc(rs, match)
	if i < 0 {
		return requestlogview.Request{}, false
	}
	return rs[i], true
}

// One stack for the request log: served calls are reported with their
// status and principal, the ingest stream takes other servers' events,
// the reporter package delivers to it, and the monitor statistics answer
// from what arrived.
func TestRequestLogOverGRPC(t *testing.T) {
	t.Parallel()
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true})
	admin := authtest.Email("rl-admin")
	adminID := e.Superuser(t, admin, "admin password 1")
	staff := e.SignIn(t, admin)
	plain := e.SignIn(t, authtest.Email("rl-user"))
	key := e.NewKey(t, "svc-key", apikey.TypeService, admin, nil)
	keys := apikeysv1.NewAPIKeyServiceClient(e.Conn)
	mon := monitorv1.NewMonitorServiceClient(e.Conn)
	ingest := ingestv1.NewIngestServiceClient(e.Conn)
	ctx := context.Background()

	t.Run("served calls are logged", func(t *testing.T) {
		calls := []struct {
			name string
			ctx  context.Context
			req  *apikeysv1.GetRequest
			want codes.Code
		}{
			{"by key", metadata.AppendToOutgoingContext(withKey(key.Key), grpcserver.HeaderRequestID, "rid-key"), &apikeysv1.GetRequest{Id: key.State.ID}, codes.PermissionDenied},
			{"no credentials", metadata.AppendToOutgoingContext(ctx, grpcserver.HeaderRequestID, "rid-anon"), &apikeysv1.GetRequest{Id: key.State.ID}, codes.Unauthenticated},
			{"not found", metadata.AppendToOutgoingContext(withBearer(staff.Access), grpcserver.HeaderRequestID, "rid-missing"), &apikeysv1.GetRequest{Id: 987654}, codes.NotFound},
		}
		for _, c := range calls {
			if _, err := keys.Get(c.ctx, c.req); code(err) != c.want {
				t.Fatalf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		// A streaming call: reflection.
		rs, err := reflectionpb.NewServerReflectionClient(e.Conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.Recv(); err != nil {
			t.Fatal(err)
		}
		_ = rs.CloseSend()
		if _, err := rs.Recv(); err == nil {
			t.Fatal("reflection stream did not end")
		}

		got := waitRequests(t, e, requestlogview.Filter{Service: "cfgd.apikeys.v1.APIKeyService", Method: "Get"}, 3)
		want := []struct {
			rid, status, code string
			auth              bool
			user, keyID       int64
			keyName, username string
		}{
			// The key service is staff only: a key is refused, and logged
			// with the key's fields.
			{"rid-key", requestlog.StatusError, "PERMISSION_DENIED", true, adminID, key.State.ID, "svc-key", ""},
			{"rid-anon", requestlog.StatusError, "UNAUTHENTICATED", false, 0, 0, "", ""},
			{"rid-missing", requestlog.StatusError, "NOT_FOUND", true, staff.UserID, 0, "", admin},
		}
		for _, w := range want {
			r, ok := find(got, func(r requestlogview.Request) bool { return r.RequestID == w.rid })
			if !ok {
				t.Fatalf("%s not logged: %+v", w.rid, got)
			}
			if r.Status != w.status || r.GRPCStatusCode != w.code || r.IsAuthenticated != w.auth || r.UserID != w.user ||
				r.APIKeyID != w.keyID || r.APIKeyName != w.keyName || r.Username != w.username || r.ClientIP != "127.0.0.1" ||
				time.Since(r.CreatedAt) > time.Minute || r.DurationMS < 0 {
				t.Errorf("%s logged as %+v, want %+v from 127.0.0.1", w.rid, r, w)
			}
			if (w.code == "OK") != (r.ErrorMessage == "") {
				t.Errorf("%s: error message %q", w.rid, r.ErrorMessage)
			}
			if r.ReportedBy != requestlog.ReportedBySelf {
				t.Errorf("%s: cfgd's own call reported by %q", w.rid, r.ReportedBy)
			}
		}
		refl := waitRequests(t, e, requestlogview.Filter{Service: "grpc.reflection.v1.ServerReflection"}, 1)
		if r := refl[0]; r.MethodName != "ServerReflectionInfo" || r.Status != requestlog.StatusSuccess || r.IsAuthenticated {
			t.Errorf("reflection stream logged as %+v", r)
		}
	})

	t.Run("ingest stream", func(t *testing.T) {
		at := timestamppb.New(time.Now().Add(-time.Minute))
		ev := func(method, st string, dur int64) *ingestv1.Event {
			return &ingestv1.Event{ServiceName: "ext.Billing", MethodName: method, GrpcStatusCode: st, DurationMs: dur, CreatedAt: at, ClientIp: "10.0.0.7"}
		}
		stream, err := ingest.Report(withKey(key.Key))
		if err != nil {
			t.Fatal(err)
		}
		batches := [][]*ingestv1.Event{
			{ev("Charge", "OK", 10), {ServiceName: "ext.Billing", MethodName: "Charge", Status: "bogus"}, ev("Charge", "Internal", 30)},
			{{MethodName: "Refund", Status: "success", DurationMs: -1}, ev("Refund", "4", 50)},
		}
		for _, b := range batches {
			if err := stream.Send(&ingestv1.ReportRequest{Events: b}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := stream.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		var problems []string
		for _, fe := range res.Errors {
			problems = append(problems, fmt.Sprintf("%d.%s", fe.Index, fe.Field))
		}
		if res.Accepted != 3 || res.Rejected != 2 || !slices.Equal(problems, []string{"1.status", "3.service_name", "3.duration_ms"}) {
			t.Fatalf("ingest answered %+v (problems %v)", res, problems)
		}
		got := waitRequests(t, e, requestlogview.Filter{Service: "ext.Billing"}, 3)
		statuses := map[string]int{}
		for _, r := range got {
			statuses[r.Status]++
		}
		if len(got) != 3 || statuses[requestlog.StatusSuccess] != 1 || statuses[requestlog.StatusError] != 1 || statuses[requestlog.StatusTimeout] != 1 {
			t.Errorf("ingested %+v", got)
		}
		// Who posted is recorded by the server: the key, whatever the
		// events say of themselves.
		for _, r := range got {
			if r.ReportedBy != requestlog.ReportedByKey(key.State.ID) {
				t.Errorf("ingested row reported by %q, want the key %d", r.ReportedBy, key.State.ID)
			}
		}
		// The ingest service's own calls are not logged (recursion).
		if rs, n, err := e.Requests.Requests(ctx, requestlogview.Filter{Service: ingestv1.IngestService_ServiceDesc.ServiceName}); err != nil || n != 0 {
			t.Errorf("ingest calls logged: %d %+v %v", n, rs, err)
		}
	})

	t.Run("ingest refuses", func(t *testing.T) {
		big := make([]*ingestv1.Event, requestlog.MaxBatchEvents+1)
		for i := range big {
			big[i] = &ingestv1.Event{ServiceName: "a", MethodName: "b", Status: "success"}
		}
		cases := []struct {
			name string
			ctx  context.Context
			msg  *ingestv1.ReportRequest
			want codes.Code
		}{
			{"no key", ctx, &ingestv1.ReportRequest{}, codes.Unauthenticated},
			{"bad key", withKey(apikey_(t)), &ingestv1.ReportRequest{}, codes.Unauthenticated},
			{"plain user", withBearer(plain.Access), &ingestv1.ReportRequest{}, codes.PermissionDenied},
			{"too many events", withKey(key.Key), &ingestv1.ReportRequest{Events: big}, codes.InvalidArgument},
			// Nothing stored: an error (issue #21 point 6), safe to retry.
			{"nothing valid", withKey(key.Key), &ingestv1.ReportRequest{Events: []*ingestv1.Event{{ServiceName: "a", MethodName: "b", Status: "bogus"}}}, codes.InvalidArgument},
		}
		for _, c := range cases {
			stream, err := ingest.Report(c.ctx)
			if err == nil {
				_ = stream.Send(c.msg)
				_, err = stream.CloseAndRecv()
			}
			if code(err) != c.want {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
	})

	// Issue #21 point 5 over gRPC: the idempotency-key metadata.
	t.Run("ingest idempotency key", func(t *testing.T) {
		send := func(key, method string) (*ingestv1.ReportResponse, error) {
			stream, err := ingest.Report(metadata.AppendToOutgoingContext(withKey(key), grpcserver.MetadataIdempotencyKey, "batch-1"))
			if err != nil {
				return nil, err
			}
			for _, m := range []string{method, "Two"} {
				ev := &ingestv1.Event{ServiceName: "ext.Idem", MethodName: m, GrpcStatusCode: "OK"}
				if err := stream.Send(&ingestv1.ReportRequest{Events: []*ingestv1.Event{ev}}); err != nil {
					return nil, err
				}
			}
			return stream.CloseAndRecv()
		}
		for range 3 {
			if res, err := send(key.Key, "One"); err != nil || res.Accepted != 2 {
				t.Fatalf("%+v %v", res, err)
			}
		}
		if _, err := send(key.Key, "Other"); code(err) != codes.Aborted {
			t.Fatalf("same key, other body: %v", err)
		}
		got := waitRequests(t, e, requestlogview.Filter{Service: "ext.Idem"}, 2)
		time.Sleep(time.Second) // what a duplicate would have added
		if _, n, err := e.Requests.Requests(ctx, requestlogview.Filter{Service: "ext.Idem"}); err != nil || n != 2 {
			t.Fatalf("ext.Idem counted %d (%v), want 2: %+v", n, err, got)
		}
	})

	t.Run("reporter package delivers", func(t *testing.T) {
		rep, err := reporter.New(e.Conn, reporter.Config{APIKey: key.Key, Batch: requestlog.BatcherConfig{
			QueueSize: 100, BatchSize: 10, FlushInterval: 20 * time.Millisecond, SendTimeout: 5 * time.Second,
		}}, testenv.Quiet())
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rep.Run(rctx) }()
		now := time.Now().UTC()
		rep.Report(ctx, []requestlog.Event{
			requestlog.FromCall(requestlog.Call{FullMethod: "/ext.Shop/Buy", Start: now.Add(-15 * time.Millisecond), End: now, Peer: "10.1.1.1:4000"}),
			requestlog.FromCall(requestlog.Call{FullMethod: "/ext.Shop/Buy", Code: uint32(codes.Canceled), Message: "gone", Start: now, End: now}),
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if rep.Sent() != 2 || rep.Dropped() != 0 {
			t.Fatalf("sent %d dropped %d", rep.Sent(), rep.Dropped())
		}
		got := waitRequests(t, e, requestlogview.Filter{Service: "ext.Shop"}, 2)
		if _, ok := find(got, func(r requestlogview.Request) bool {
			return r.Status == requestlog.StatusCancelled && r.GRPCStatusCode == "CANCELLED" && r.ErrorMessage == "gone"
		}); !ok {
			t.Errorf("cancelled call missing: %+v", got)
		}
		if _, ok := find(got, func(r requestlogview.Request) bool {
			return r.Status == requestlog.StatusSuccess && r.DurationMS == 15 && r.ClientIP == "10.1.1.1"
		}); !ok {
			t.Errorf("successful call missing: %+v", got)
		}
	})

	t.Run("monitor statistics", func(t *testing.T) {
		st := withBearer(staff.Access)
		// The rollups trail the raw table by a moment: wait for the
		// last events delivered to be counted.
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := e.Requests.Methods(ctx, 1, "ext.Shop")
			if err != nil {
				t.Fatal(err)
			}
			if len(m) == 1 && m[0].TotalRequests == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ext.Shop statistics: %+v", m)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// What the REST endpoints answer comes from the same store: compare.
		want, err := e.Requests.Overview(ctx, 24)
		if err != nil {
			t.Fatal(err)
		}
		o, err := mon.Overview(st, &monitorv1.OverviewRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if o.TotalRequests != want.TotalRequests || o.TotalRequests != 11 || o.SuccessRate != want.SuccessRate ||
			o.AvgDurationMs != want.AvgDurationMS || o.TotalServices != want.TotalServices || o.FailedRequests != want.FailedRequests {
			t.Errorf("overview %+v, read model %+v", o, want)
		}
		ms, err := mon.Methods(st, &monitorv1.MethodsRequest{Hours: 1, Service: "ext.Billing"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms.Methods) != 2 {
			t.Fatalf("methods %+v", ms.Methods)
		}
		for _, m := range ms.Methods {
			switch m.MethodName {
			case "Charge":
				if m.TotalRequests != 2 || m.SuccessfulRequests != 1 || m.FailedRequests != 1 || m.SuccessRate != 50 ||
					m.AvgDurationMs != 20 || m.MinDurationMs != 10 || m.MaxDurationMs != 30 {
					t.Errorf("Charge %+v", m)
				}
			case "Refund":
				if m.TotalRequests != 1 || m.FailedRequests != 1 || m.SuccessRate != 0 || m.MaxDurationMs != 50 {
					t.Errorf("Refund %+v", m)
				}
			default:
				t.Errorf("unexpected method %+v", m)
			}
		}
		ss, err := mon.Services(st, &monitorv1.ServicesRequest{Hours: 8760})
		if err != nil {
			t.Fatal(err)
		}
		svc := map[string]*monitorv1.ServiceStats{}
		for _, s := range ss.Services {
			svc[s.ServiceName] = s
		}
		if b := svc["ext.Billing"]; b == nil || b.TotalRequests != 3 || b.MethodsCount != 2 || b.AvgDurationMs != 30 || b.P95DurationMs <= 0 {
			t.Errorf("services %+v", ss.Services)
		}
		rq, err := mon.Requests(st, &monitorv1.RequestsRequest{Service: "ext.Billing", Status: "timeout"})
		if err != nil {
			t.Fatal(err)
		}
		if rq.Count != 1 || len(rq.Results) != 1 || rq.Results[0].MethodName != "Refund" || rq.Results[0].GrpcStatusCode != "DEADLINE_EXCEEDED" ||
			rq.Results[0].ClientIp != "10.0.0.7" || rq.Results[0].CreatedAt == "" || rq.Results[0].ReportedBy != requestlog.ReportedByKey(key.State.ID) {
			t.Errorf("requests %+v", rq)
		}

		refused := []struct {
			name string
			call func() error
			want codes.Code
		}{
			{"key holder", func() error { _, err := mon.Overview(withKey(key.Key), &monitorv1.OverviewRequest{}); return err }, codes.PermissionDenied},
			{"plain user", func() error {
				_, err := mon.Services(withBearer(plain.Access), &monitorv1.ServicesRequest{})
				return err
			}, codes.PermissionDenied},
			{"no credentials", func() error { _, err := mon.Methods(ctx, &monitorv1.MethodsRequest{}); return err }, codes.Unauthenticated},
			{"hours too many", func() error { _, err := mon.Overview(st, &monitorv1.OverviewRequest{Hours: 8761}); return err }, codes.InvalidArgument},
			{"hours negative", func() error { _, err := mon.Methods(st, &monitorv1.MethodsRequest{Hours: -1}); return err }, codes.InvalidArgument},
			{"page size", func() error { _, err := mon.Requests(st, &monitorv1.RequestsRequest{PageSize: 1001}); return err }, codes.InvalidArgument},
			{"status", func() error { _, err := mon.Requests(st, &monitorv1.RequestsRequest{Status: "fine"}); return err }, codes.InvalidArgument},
		}
		for _, c := range refused {
			if err := c.call(); code(err) != c.want {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
	})
}

// With Kafka down, ingest answers Unavailable within about a second, and
// the served calls still succeed (their events are dropped and counted).
func TestRequestLogKafkaDown(t *testing.T) {
	t.Parallel()
	e := grpctest.StartWith(t, grpctest.Options{RequestLog: true, KafkaDown: true})
	admin := authtest.Email("rl-down")
	e.Superuser(t, admin, "admin password 1")
	key := e.NewKey(t, "down-key", apikey.TypeService, admin, nil)
	ingest := ingestv1.NewIngestServiceClient(e.Conn)
	for i := range 3 {
		start := time.Now()
		stream, err := ingest.Report(withKey(key.Key))
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&ingestv1.ReportRequest{Events: []*ingestv1.Event{{ServiceName: "a", MethodName: "b", Status: "success"}}})
		_, err = stream.CloseAndRecv()
		took := time.Since(start)
		if code(err) != codes.Unavailable || took > 1500*time.Millisecond {
			t.Fatalf("attempt %d: %v after %s, want Unavailable within 1.5s", i, err, took)
		}
		t.Logf("attempt %d: Unavailable after %s", i, took.Round(time.Millisecond))
	}
	keys := apikeysv1.NewAPIKeyServiceClient(e.Conn)
	staff := withBearer(e.SignIn(t, admin).Access)
	for range 5 {
		start := time.Now()
		if _, err := keys.Get(staff, &apikeysv1.GetRequest{Id: key.State.ID}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("served call took %s with Kafka down", took)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Reporter.Dropped() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %d, sent %d: want the 5 calls dropped", e.Reporter.Dropped(), e.Reporter.Sent())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
