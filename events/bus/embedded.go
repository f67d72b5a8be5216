package bus

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the in-process Kafka-protocol broker cfgd runs when
// KAFKA__BROKERS is empty. It keeps its log in a data directory so events
// survive a restart, and listens on a fixed loopback address so ordinary
// Kafka tools (kcat, kafka-console-consumer) can inspect it.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
}

// StartEmbedded starts one broker on addr ("host:port"; port 0 picks a free
// one) with its data under dataDir ("" keeps it in memory, for tests).
func StartEmbedded(dataDir, addr string) (*Embedded, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka port %q: %w", portStr, err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ClusterID("cfgd-embedded"),
		kfake.DefaultNumPartitions(1),
		// kfake always binds 127.0.0.1; honour the configured host instead.
		kfake.ListenFn(func(network, a string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(a)
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		// Consumer groups rejoin quickly after a restart.
		kfake.GroupMinSessionTimeout(0),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka on %s: %w", addr, err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, fmt.Errorf("start embedded kafka on %s: no listener", addr)
	}
	return &Embedded{cluster: c, addr: addrs[0]}, nil
}

// Addr is the broker's address for clients.
func (e *Embedded) Addr() string { return e.addr }

// Close stops the broker and flushes its data directory.
func (e *Embedded) Close() { e.cluster.Close() }
