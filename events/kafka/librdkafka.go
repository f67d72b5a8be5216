package kafka

import (
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertiseHandshakeV0 lets librdkafka clients (kcat) log in to the
// embedded broker. librdkafka authenticates only when ApiVersions lists
// SaslHandshake from version 0, as every real broker does; the embedded
// broker serves (and lists) version 1 alone, which is the version
// librdkafka then uses. The broker's own answer, captured once, is served
// with that one range widened; a version 0 handshake is still refused.
func advertiseHandshakeV0(c *kfake.Cluster, addr string) error {
	keys, err := brokerAPIVersions(addr)
	if err != nil {
		return err
	}
	maxVersions := int16(0)
	for i := range keys {
		switch kmsg.Key(keys[i].ApiKey) {
		case kmsg.SASLHandshake:
			keys[i].MinVersion = 0
		case kmsg.ApiVersions:
			maxVersions = keys[i].MaxVersion
		}
	}
	c.ControlKey(int16(kmsg.ApiVersions), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req, ok := r.(*kmsg.ApiVersionsRequest)
		if !ok {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		if req.Version > maxVersions { // answered as a broker does (KIP-511)
			resp.Version = 0
			resp.ErrorCode = kerr.UnsupportedVersion.Code
			key := kmsg.NewApiVersionsResponseApiKey()
			key.ApiKey, key.MaxVersion = int16(kmsg.ApiVersions), maxVersions
			resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{key}
			return resp, nil, true
		}
		resp.ApiKeys = slices.Clone(keys)
		return resp, nil, true
	})
	return nil
}

// brokerAPIVersions asks the broker at addr which API versions it serves
// (ApiVersions needs no login).
func brokerAPIVersions(addr string) ([]kmsg.ApiVersionsResponseApiKey, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ApiVersionsRequest = false
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return nil, fmt.Errorf("embedded kafka api versions: %w", err)
	}
	defer b.Close()
	resp, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: 0})
	if err != nil {
		return nil, fmt.Errorf("embedded kafka api versions: %w", err)
	}
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(resp.ApiKeys))
	for _, k := range resp.ApiKeys {
		key := kmsg.NewApiVersionsResponseApiKey()
		key.ApiKey, key.MinVersion, key.MaxVersion = k.ApiKey, k.MinVersion, k.MaxVersion
		keys = append(keys, key)
	}
	return keys, nil
}
