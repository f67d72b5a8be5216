package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/kafka"
)

// eventLog: every event of the Postgres event store reached Kafka's
// events topic once, and each stream's events lie there in version order.
func (ck *checker) eventLog(ctx context.Context) {
	type key struct {
		stream  string
		version int64
	}
	stored := map[key]bool{}
	rows, err := ck.pg.Query(ctx, `SELECT stream_id, stream_version FROM events`)
	if err != nil {
		ck.rp.violate("event store: %v", err)
		return
	}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.stream, &k.version); err != nil {
			rows.Close()
			ck.rp.violate("event store: %v", err)
			return
		}
		stored[k] = true
	}
	rows.Close()
	bus := kafka.Config{Brokers: []string{ck.r.env["KAFKA__BROKERS"]}, TopicPrefix: "cfgd.", SASL: kafka.SASL{
		Mechanism: ck.r.env["KAFKA__SASL_MECHANISM"], User: ck.r.env["KAFKA__SASL_USERNAME"], Password: ck.r.env["KAFKA__SASL_PASSWORD"]}}
	topic := bus.Topic(kafka.TopicEvents)
	seen := map[key]int{}
	var outOfOrder []string
	read := func() error {
		client, err := sarama.NewClient(bus.Brokers, bus.Sarama())
		if err != nil {
			return err
		}
		defer client.Close()
		consumer, err := sarama.NewConsumerFromClient(client)
		if err != nil {
			return err
		}
		defer consumer.Close()
		parts, err := client.Partitions(topic)
		if err != nil {
			return err
		}
		for _, p := range parts {
			hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
			if err != nil {
				return err
			}
			if hwm <= oldest {
				continue
			}
			pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				return err
			}
			last := map[string]int64{}
			for done := false; !done; {
				select {
				case m := <-pc.Messages():
					var k key
					for _, h := range m.Headers {
						switch string(h.Key) {
						case events.HeaderStream:
							k.stream = string(h.Value)
						case events.HeaderVersion:
							k.version, _ = strconv.ParseInt(string(h.Value), 10, 64)
						}
					}
					seen[k]++
					if k.version <= last[k.stream] && len(outOfOrder) < 5 {
						outOfOrder = append(outOfOrder, fmt.Sprintf("%s version %d after %d (partition %d offset %d)", k.stream, k.version, last[k.stream], p, m.Offset))
					}
					last[k.stream] = max(last[k.stream], k.version)
					done = m.Offset >= hwm-1
				case err := <-pc.Errors():
					pc.Close()
					return err
				case <-time.After(30 * time.Second):
					pc.Close()
					return fmt.Errorf("partition %d: nothing for 30s before offset %d", p, hwm)
				case <-ctx.Done():
					pc.Close()
					return ctx.Err()
				}
			}
			pc.Close()
		}
		return nil
	}
	// The relay may still be publishing the last events: read again
	// (bounded) while some are missing.
	var missing, doubled, unknown int
	for attempt := 0; ; attempt++ {
		clear(seen)
		outOfOrder = outOfOrder[:0]
		if err := read(); err != nil {
			ck.rp.violate("events topic: %v", err)
			return
		}
		missing = 0
		for k := range stored {
			if seen[k] == 0 {
				missing++
			}
		}
		if missing == 0 || attempt == 5 {
			break
		}
		time.Sleep(5 * time.Second)
	}
	for k, n := range seen {
		if n > 1 {
			doubled++
		}
		if !stored[k] {
			unknown++
		}
	}
	if missing > 0 || doubled > 0 || unknown > 0 {
		ck.rp.violate("events topic against the event store (%d events): %d missing, %d more than once, %d not in the store", len(stored), missing, doubled, unknown)
	}
	if len(outOfOrder) > 0 {
		ck.rp.violate("events topic out of stream order: %v", outOfOrder)
	}
	ck.rp.note("event store: %d events, each in Kafka once and in stream order: %v", len(stored), missing+doubled+unknown+len(outOfOrder) == 0)
}
