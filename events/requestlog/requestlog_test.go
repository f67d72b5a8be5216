package requestlog

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events"
)

func TestStatusFromCode(t *testing.T) {
	for code, want := range map[string]string{
		"OK": StatusSuccess, "DeadlineExceeded": StatusTimeout, "Canceled": StatusCancelled,
		"DEADLINE_EXCEEDED": StatusTimeout, "CANCELLED": StatusCancelled, "4": StatusTimeout, "1": StatusCancelled, "0": StatusSuccess,
		"Internal": StatusError, "Unavailable": StatusError, "NotFound": StatusError, "": StatusError,
	} {
		if got := StatusFromCode(code); got != want {
			t.Errorf("StatusFromCode(%q) = %q, want %q", code, got, want)
		}
	}
	if CodeName(4) != "DEADLINE_EXCEEDED" || CodeName(16) != "UNAUTHENTICATED" || CodeName(99) != "CODE_99" {
		t.Errorf("CodeName: %s %s %s", CodeName(4), CodeName(16), CodeName(99))
	}
}

func valid() Event {
	return Event{ServiceName: "pkg.Svc", MethodName: "Get", Status: StatusSuccess, DurationMS: 3,
		GRPCStatusCode: "OK", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), ClientIP: "10.0.0.1"}
}

func TestCheck(t *testing.T) {
	long := strings.Repeat("x", 5000)
	cases := []struct {
		name   string
		change func(*Event)
		field  string
	}{
		{"valid", func(*Event) {}, ""},
		{"pending allowed", func(e *Event) { e.Status = StatusPending }, ""},
		{"unknown status", func(e *Event) { e.Status = "weird" }, "status"},
		{"missing status", func(e *Event) { e.Status = "" }, "status"},
		{"negative duration", func(e *Event) { e.DurationMS = -1 }, "duration_ms"},
		{"absurd duration", func(e *Event) { e.DurationMS = MaxDurationMS + 1 }, "duration_ms"},
		{"missing service", func(e *Event) { e.ServiceName = " " }, "service_name"},
		{"missing method", func(e *Event) { e.MethodName = "" }, "method_name"},
		{"long service", func(e *Event) { e.ServiceName = long }, "service_name"},
		{"long method", func(e *Event) { e.MethodName = long }, "method_name"},
		{"long request id", func(e *Event) { e.RequestID = long }, "request_id"},
		{"long error", func(e *Event) { e.ErrorMessage = long + long }, "error_message"},
		{"long username", func(e *Event) { e.Username = long }, "username"},
		{"long key name", func(e *Event) { e.APIKeyName = long }, "api_key_name"},
		{"bad utf8", func(e *Event) { e.MethodName = "\xff" }, "method_name"},
		{"bad code", func(e *Event) { e.GRPCStatusCode = "Nope" }, "grpc_status_code"},
		{"bad ip", func(e *Event) { e.ClientIP = "not-an-ip" }, "client_ip"},
		{"negative user", func(e *Event) { e.UserID = -2 }, "user_id"},
		{"negative key", func(e *Event) { e.APIKeyID = -2 }, "api_key_id"},
		{"ancient time", func(e *Event) { e.CreatedAt = time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC) }, "created_at"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := valid()
			c.change(&e)
			errs := Check(7, e)
			if c.field == "" {
				if len(errs) != 0 {
					t.Fatalf("want no error, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != c.field || errs[0].Index != 7 {
				t.Fatalf("want one error on %s at 7, got %v", c.field, errs)
			}
			if !strings.HasPrefix(errs[0].Error(), "events[7]."+c.field+": ") {
				t.Fatalf("message %q does not name field and index", errs[0].Error())
			}
		})
	}
}

func TestValidateKeepsValidRest(t *testing.T) {
	now := time.Date(2026, 5, 5, 5, 5, 5, 0, time.UTC)
	in := []Event{
		valid(),
		{ServiceName: "s", MethodName: "m", GRPCStatusCode: "DeadlineExceeded"}, // status derived, time filled
		{ServiceName: "s", MethodName: "m", Status: "bogus"},
		{ServiceName: "", MethodName: "m", Status: StatusError, DurationMS: -5},
	}
	ok, errs := Validate(in, now, Window{})
	if len(ok) != 2 {
		t.Fatalf("accepted %d, want 2", len(ok))
	}
	if ok[1].Status != StatusTimeout || !ok[1].CreatedAt.Equal(now) {
		t.Fatalf("normalized = %+v", ok[1])
	}
	if len(errs) != 3 || errs[0].Index != 2 || errs[1].Index != 3 || errs[2].Index != 3 {
		t.Fatalf("errors = %v", errs)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	full := Event{RequestID: "r-1", ServiceName: "a.B", MethodName: "C", Status: StatusError, DurationMS: 1234,
		GRPCStatusCode: "Internal", ErrorMessage: "boom", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
		ClientIP: "::1", UserID: 42, Username: "ann", IsAuthenticated: true, APIKeyID: 7, APIKeyName: "ci"}
	in := []Event{full, {ServiceName: "x", MethodName: "y", Status: StatusSuccess, CreatedAt: time.Unix(1_700_000_000, 0).UTC()}}
	b := AppendBatch(nil, in)
	out, err := DecodeBatch(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("decoded %d", len(out))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, out[i], in[i])
		}
	}
	for _, bad := range [][]byte{nil, {}, {9, 1, 2}, {formatV1, 0x0a, 0x50}, {formatV1, 0x12, 0x00}, []byte("{\"json\":1}")} {
		if _, err := DecodeBatch(bad, nil); err == nil {
			t.Errorf("DecodeBatch(%x) accepted garbage", bad)
		}
	}
}

func sample(n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{RequestID: "req-0123456789", ServiceName: "cfgd.monitor.v1.MonitorService", MethodName: "GetOverview",
			Status: StatusSuccess, DurationMS: int64(i % 500), GRPCStatusCode: "OK", CreatedAt: time.Now().UTC(),
			ClientIP: "127.0.0.1", UserID: 12, Username: "someone@example.com", IsAuthenticated: true, APIKeyID: 3, APIKeyName: "loadgen"}
	}
	return out
}

// The packed protobuf encoding against JSON of the same 512 events; run
// with go test -bench . ./events/requestlog/.
func BenchmarkEncodePacked(b *testing.B) {
	ev := sample(512)
	var buf []byte
	for b.Loop() {
		buf = AppendBatch(buf[:0], ev)
	}
	b.ReportMetric(float64(len(buf))/512, "bytes/event")
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEncodePackedSigned is BenchmarkEncodePacked plus the
// record's signature, what the producer does per record.
func BenchmarkEncodePackedSigned(b *testing.B) {
	ev := sample(512)
	s, err := events.NewSigner([]byte(strings.Repeat("k", events.MinSigningKeyBytes)))
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	for b.Loop() {
		buf = AppendBatch(buf[:0], ev)
		_ = s.Sign(buf)
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodePacked(b *testing.B) {
	buf := AppendBatch(nil, sample(512))
	var out []Event
	for b.Loop() {
		out, _ = DecodeBatch(buf, out[:0])
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodePackedFresh decodes into a new slice each time, as the
// sink does (each record's events are kept until its rows are added).
func BenchmarkDecodePackedFresh(b *testing.B) {
	buf := AppendBatch(nil, sample(512))
	for b.Loop() {
		if _, err := DecodeBatch(buf, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkEncodeJSON(b *testing.B) {
	ev := sample(512)
	var n int
	for b.Loop() {
		buf, _ := json.Marshal(ev)
		n = len(buf)
	}
	b.ReportMetric(float64(n)/512, "bytes/event")
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodeJSON(b *testing.B) {
	buf, _ := json.Marshal(sample(512))
	for b.Loop() {
		var out []Event
		_ = json.Unmarshal(buf, &out)
	}
	b.ReportMetric(float64(b.N*512)/b.Elapsed().Seconds(), "events/s")
}

// Issue #21 point 4: every spelling a client uses is taken, and one is
// stored.
func TestParseCodeTakesEverySpelling(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", true},
		{"DeadlineExceeded", "DEADLINE_EXCEEDED", true},
		{"4", "DEADLINE_EXCEEDED", true},
		{"Canceled", "CANCELLED", true},
		{"CANCELLED", "CANCELLED", true},
		{"0", "OK", true},
		{"OK", "OK", true},
		{"16", "UNAUTHENTICATED", true},
		{"17", "", false},
		{"004", "DEADLINE_EXCEEDED", true},
		{"300", "", false},
		{"-1", "", false},
		{"04x", "", false},
		{"deadline_exceeded", "", false},
		{"", "", false},
	} {
		got, ok := ParseCode(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseCode(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for _, in := range []string{"DeadlineExceeded", "4", "DEADLINE_EXCEEDED"} {
		e := Normalize(Event{ServiceName: "s", MethodName: "m", GRPCStatusCode: in}, time.Now())
		if e.GRPCStatusCode != "DEADLINE_EXCEEDED" || e.Status != StatusTimeout || len(Check(0, e)) > 0 {
			t.Errorf("%s normalized to %+v", in, e)
		}
	}
	// Every event is checked: a name must not cost an allocation (a
	// failed number parse made one, 8% of a replay's CPU).
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseCode("DeadlineExceeded") }); n != 0 {
		t.Errorf("ParseCode of a name: %.0f allocations, want 0", n)
	}
	if got := CodeSpellings("4"); len(got) != 2 || got[0] != "DEADLINE_EXCEEDED" || got[1] != "DeadlineExceeded" {
		t.Errorf("CodeSpellings(4) = %v", got)
	}
}

func FuzzParseCode(f *testing.F) {
	for _, s := range []string{"OK", "4", "DeadlineExceeded", "DEADLINE_EXCEEDED", "Canceled", "99", "", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := ParseCode(s)
		if !ok {
			if c != "" || ValidCode(s) || CanonicalCode(s) != s {
				t.Fatalf("%q refused but %q", s, c)
			}
			return
		}
		// The canonical name is a fixed point, and every spelling of it
		// parses back to it.
		if again, ok := ParseCode(c); !ok || again != c {
			t.Fatalf("%q -> %q -> %q", s, c, again)
		}
		for _, sp := range CodeSpellings(s) {
			if back, _ := ParseCode(sp); back != c {
				t.Fatalf("spelling %q of %q parses to %q", sp, c, back)
			}
		}
	})
}

// Issue #20 point 11: created_at outside the retention or ahead of the
// clock is refused per event.
func TestCheckTimeWindow(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	w := WindowFor(30)
	for _, tc := range []struct {
		at  time.Time
		bad bool
	}{
		{now, false},
		{now.Add(-29 * 24 * time.Hour), false},
		{now.Add(4 * time.Minute), false},
		{now.Add(-31 * 24 * time.Hour), true},
		{time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{now.Add(10 * time.Minute), true},
		{time.Date(2105, 1, 1, 0, 0, 0, 0, time.UTC), true},
	} {
		ok, errs := Validate([]Event{{ServiceName: "s", MethodName: "m", Status: StatusSuccess, CreatedAt: tc.at}}, now, w)
		if bad := len(errs) > 0; bad != tc.bad || (bad && (errs[0].Field != "created_at" || len(ok) != 0)) {
			t.Errorf("created_at %v: accepted %d, problems %v; want refused %v", tc.at, len(ok), errs, tc.bad)
		}
	}
}

// Issue #21 point 7: every id is an exact JSON number.
func TestIDsFitInAJSONNumber(t *testing.T) {
	if id := ID(1<<idPartitionBits-1, 1<<idOffsetBits-1, 1<<idIndexBits-1); id != MaxJSONInt {
		t.Fatalf("largest id %d, want %d", id, uint64(MaxJSONInt))
	}
	if got := ID(2, 5, 3); got != 2<<48|5<<12|3 || IDIndex(got) != 3 {
		t.Fatalf("ID(2, 5, 3) = %d", got)
	}
	for _, tc := range []struct {
		p    int32
		off  int64
		n    int
		fits bool
	}{
		{0, 0, 4096, true}, {31, 1<<36 - 1, 1, true}, {32, 0, 1, false}, {0, 1 << 36, 1, false}, {0, 0, 4097, false}, {-1, 0, 1, false},
	} {
		if IDFits(tc.p, tc.off, tc.n) != tc.fits {
			t.Errorf("IDFits(%d, %d, %d) != %v", tc.p, tc.off, tc.n, tc.fits)
		}
	}
}
