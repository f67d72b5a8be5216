package apikey_test

import (
	"context"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/kafka"
)

// Chaos finding 2 (issue 29): a flush that timed out while the producer
// still holds its record, which Kafka stores afterwards, is not sent
// again by the next flush, so a use is counted once.
func TestFlushTimedOutIsNotCountedTwice(t *testing.T) {
	t.Parallel()
	// A broker that holds the record: the flush times out first.
	c, open := testenv.HeldKafka(t, false)
	rc := apikey.DefaultUsageRecorderConfig(c)
	rc.Timeout = testenv.HeldTimeout
	r, err := apikey.NewUsageRecorder(rc, testenv.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.Record(7, time.Now())
	if err := r.Flush(ctx); err == nil {
		t.Fatal("the first flush got an answer from a held broker")
	}
	_ = r.Flush(ctx) // what a flush keeps back is not sent while its record may land
	open()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var requests int64
	for _, m := range testenv.ReadTopic(t, c, c.Topic(kafka.TopicAPIKeyUsage), 2, 2*time.Second) {
		uses, err := apikey.DecodeUses(m.Value, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			requests += u.Requests
		}
	}
	if requests != 1 {
		t.Fatalf("%d requests counted in Kafka, want the one use once", requests)
	}
}
