package testenv

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cfgd/cfgd/events/kafka"
)

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
