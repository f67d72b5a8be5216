package testenv

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cfgd/cfgd/events/kafka"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/requestlogkafka"
)

// HeldTimeout is the send timeout of a producer against HeldKafka:
// shorter than sarama's 2.5 s wait for the broker's answer, so a send
// times out while its records are still held and may land afterwards.
const HeldTimeout = 500 * time.Millisecond

// HeldKafka starts an in-process broker (no login) that holds every
// produce request until open is called: what a paused broker looks like
// to a producer, whose Send then times out while the records are still
// in flight. With refuseFirst the first produce request is refused
// (MESSAGE_TOO_LARGE, which sarama does not retry) once open is called,
// instead of stored.
func HeldKafka(t testing.TB, refuseFirst bool) (c kafka.Config, open func()) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(kc.Close)
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // a held request would keep Close waiting
	var produces atomic.Int32
	kc.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { <-gate })
		if !refuseFirst || produces.Add(1) > 1 {
			return nil, nil, false
		}
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.MessageTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return kafka.Config{Brokers: kc.ListenAddrs(), Partitions: 1, TopicPrefix: randomName("t") + ".", ClientID: "cfgd-test"}, open
}

// HeldProducer is a request-log producer (the defaults, then tune)
// against HeldKafka(t, refuseFirst), timing out after HeldTimeout. When
// the test ends the broker is let go and the producer closed.
func HeldProducer(t testing.TB, refuseFirst bool, tune ...func(*requestlogkafka.ProducerConfig)) (p *requestlogkafka.Producer, c kafka.Config, open func()) {
	t.Helper()
	c, open = HeldKafka(t, refuseFirst)
	cfg := requestlogkafka.DefaultProducerConfig(c)
	cfg.Timeout = HeldTimeout
	for _, f := range tune {
		f(&cfg)
	}
	p, err := requestlogkafka.NewProducer(cfg, Quiet())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		open() // a held record would keep Close waiting
		_ = p.Close()
	})
	return p, c, open
}

// StoredRequestLogs closes p, so that every record it held has landed or
// failed, and counts the records on its topic of c and their events
// (reading 2 s for a record stored twice).
func StoredRequestLogs(t testing.TB, c kafka.Config, p *requestlogkafka.Producer) (records, events int) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Fatalf("testenv: close the producer: %v", err)
	}
	msgs := ReadTopic(t, c, p.Topic(), 2, 2*time.Second)
	for _, m := range msgs {
		evs, err := requestlog.DecodeBatch(m.Value, nil)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		events += len(evs)
	}
	return len(msgs), events
}
