package signing_test

import (
	"context"
	"testing"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/signing"
)

const topic = kafka.TopicRequestLogs

// send writes a record to partition p of topic, signed by s (nil: none),
// and returns its offset.
func send(t *testing.T, c kafka.Config, p int32, s *events.Signer) *sarama.ConsumerMessage {
	t.Helper()
	sc := c.Sarama()
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(c.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	body := []byte("record")
	m := &sarama.ProducerMessage{Topic: c.Topic(topic), Partition: p, Value: sarama.ByteEncoder(body)}
	var hs []*sarama.RecordHeader
	if s != nil {
		h := sarama.RecordHeader{Key: []byte(events.HeaderSignature), Value: []byte(s.Sign(body))}
		m.Headers = []sarama.RecordHeader{h}
		hs = append(hs, &h)
	}
	part, off, err := prod.SendMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	return &sarama.ConsumerMessage{Topic: m.Topic, Partition: part, Offset: off, Value: body, Headers: hs}
}

// The cut-over accepts a record without a signature only below the
// watermark of its partition recorded at the first Start; never above it,
// on a partition added later or on the topic created again (even at
// offsets below the old watermark); a wrong signature never.
func TestCutoverWatermark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := testenv.Kafka(t, 2)
	signer := testenv.Signer(t)
	other, err := events.NewSigner([]byte("not-the-deployment-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), topic); err != nil {
		t.Fatal(err)
	}
	old0 := []*sarama.ConsumerMessage{send(t, c, 0, nil), send(t, c, 0, nil)}
	forged := send(t, c, 1, other)

	cut := signing.New(pool, c, topic, testenv.Quiet())
	var unstarted *signing.Cutover
	if err := unstarted.Verify(signer, old0[0]); err == nil {
		t.Fatal("a nil cut-over accepted an unsigned record")
	}
	if err := cut.Verify(signer, old0[0]); err == nil {
		t.Fatal("an unsigned record accepted before Start")
	}
	if err := cut.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A second build starting later does not move the watermark.
	above := send(t, c, 0, nil)
	if err := signing.New(pool, c, topic, testenv.Quiet()).Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cut.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cut.Below(); len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("watermarks %v, want partition 0 below 2, partition 1 below 1", got)
	}
	genuine := send(t, c, 1, signer)
	cases := []struct {
		name string
		m    *sarama.ConsumerMessage
		ok   bool
	}{
		{"unsigned below the watermark", old0[0], true},
		{"unsigned just below the watermark", old0[1], true},
		{"unsigned above the watermark", above, false},
		{"wrong signature below the watermark", forged, false},
		{"signed above the watermark", genuine, true},
	}
	for _, tc := range cases {
		if err := cut.Verify(signer, tc.m); (err == nil) != tc.ok {
			t.Errorf("%s (partition %d offset %d): %v, want accepted %v", tc.name, tc.m.Partition, tc.m.Offset, err, tc.ok)
		}
	}

	// A partition added later has no watermark.
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreatePartitions(c.Topic(topic), 3, nil, false); err != nil {
		t.Fatal(err)
	}
	added := send(t, c, 2, nil)
	if err := signing.New(pool, c, topic, testenv.Quiet()).Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cut.Session(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := cut.Verify(signer, added); err == nil {
		t.Error("an unsigned record of a partition added later was accepted")
	}
	if err := cut.Verify(signer, old0[0]); err != nil {
		t.Errorf("the old partition lost its watermark: %v", err)
	}

	// The topic deleted and created again: its offsets start over below
	// the old watermarks, and none of them applies.
	if err := admin.DeleteTopic(c.Topic(topic)); err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, c, testenv.Quiet(), topic); err != nil {
		t.Fatal(err)
	}
	again := send(t, c, 0, nil)
	if again.Offset >= 2 {
		t.Fatalf("offset %d on the new topic: the test wants one below the old watermark", again.Offset)
	}
	if err := cut.Session(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if err := cut.Verify(signer, again); err == nil {
		t.Error("an unsigned record of the recreated topic was accepted below the old watermark")
	}
	if got := cut.Below(); len(got) != 0 {
		t.Errorf("watermarks %v on the recreated topic, want none", got)
	}
	if cut.Unsigned() != 3 {
		t.Errorf("%d records accepted unsigned, want 3", cut.Unsigned())
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM signing_watermarks`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("%d watermark rows (%v), want the first start's 2", rows, err)
	}
}
