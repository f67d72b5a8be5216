package requestlog

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/cfgd/cfgd/projections/replay"
)

// Codec is the sink's decoding and rows for a replay of its tables
// (replay.NewClickHouse): a rebuild writes the rows, and the ids, the sink
// wrote.
type Codec struct{}

var _ replay.Codec = Codec{}

// Decode implements replay.Codec.
func (Codec) Decode(m *sarama.ConsumerMessage) replay.Decoded { return decode(m) }

// NewBlock implements replay.Codec.
func (Codec) NewBlock() replay.Block { return &block{b: newBatch()} }

// Message implements replay.Decoded.
func (d decoded) Message() *sarama.ConsumerMessage { return d.msg }

// block is a batch as a replay.Block: the replay inserts it into its
// shadow raw table and commits no offsets.
type block struct{ b *batch }

func (k *block) Add(d replay.Decoded) { k.b.addDecoded(d.(decoded)) }
func (k *block) Rows() int            { return k.b.rows.Len() }
func (k *block) Records() int         { return k.b.records }
func (k *block) Poisoned() int        { return len(k.b.poison) }
func (k *block) Insert(ctx context.Context, conn driver.Conn, table string) error {
	return k.b.rows.InsertInto(ctx, conn, table)
}
