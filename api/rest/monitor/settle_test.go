package monitor_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/readmodels/requestlogview"
)

// Chaos finding 2 (issue 29): a keyed batch answered 503 because Kafka
// did not answer in time, while the producer still holds its record, is
// stored at most once however often it is retried with its
// Idempotency-Key: the key is held until the record's final result is
// known (a retry meanwhile is 409 in progress, with Retry-After). Stored
// late, the key is finished with the batch's outcome, which the next
// retry gets replayed; refused late, the key is released and the next
// retry runs.
func TestRetriedUnavailableIngestIsStoredOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// refuse makes the broker refuse the first produce request once
		// the gate opens, instead of storing it.
		refuse   bool
		replayed string
	}{
		{name: "stored late", replayed: "true"},
		{name: "refused late", refuse: true, replayed: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A broker that holds the record: the producer times out first.
			p, c, open := testenv.HeldProducer(t, tc.refuse)
			idem := requestlogview.NewIdempotency(testenv.Postgres(t), time.Now, 100*time.Millisecond)
			url := keyedIngest(t, p, nil, idem)
			body := `[{"service_name":"settle.Svc","method_name":"A","status":"success"},{"service_name":"settle.Svc","method_name":"B","status":"bogus"}]`

			code, first, _ := post(t, url, "k", body)
			if code != http.StatusServiceUnavailable {
				t.Fatalf("first: %d %s, want 503 (the broker holds the record)", code, first)
			}
			// The record may still land: the key is held.
			heldCode, held, heldHeader := post(t, url, "k", body)
			open()
			// Once the record's fate is known, the retry is answered.
			var again string
			var h http.Header
			waitFor(t, func() bool {
				code, again, h = post(t, url, "k", body)
				return code != http.StatusConflict && code != http.StatusServiceUnavailable
			})
			// Stored once: one record of one event, also after the
			// producer has flushed everything it held.
			if records, events := testenv.StoredRequestLogs(t, c, p); records != 1 || events != 1 {
				t.Fatalf("%d records of %d events in Kafka, want the batch's one event once", records, events)
			}
			if heldCode != http.StatusConflict || !strings.Contains(held, "in progress") || heldHeader.Get("Retry-After") == "" {
				t.Fatalf("retry while held: %d %s %v", heldCode, held, heldHeader)
			}
			if code != http.StatusAccepted || h.Get("Idempotent-Replayed") != tc.replayed ||
				!strings.Contains(again, `"accepted":1,"rejected":1`) || !strings.Contains(again, `"index":1`) {
				t.Fatalf("retry after the record's fate is known: %d %s %v", code, again, h)
			}
		})
	}
}
