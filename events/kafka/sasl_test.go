package kafka_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
	"github.com/cfgd/cfgd/events/kafka"
)

func ping(addr string, login kafka.SASL) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return kafka.Ping(ctx, kafka.Config{Brokers: []string{addr}, Partitions: 1, SASL: login})
}

// The embedded broker refuses clients without its login, or with a wrong
// one, and serves those with it; its login is generated into the data
// directory (for kcat -F) and kept across restarts.
func TestEmbeddedBrokerRequiresSASL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := kafka.StartEmbedded(dir, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	login := e.SASL()
	wrong := login
	wrong.Password += "x"
	tests := []struct {
		name  string
		login kafka.SASL
		ok    bool
	}{
		{"no credentials", kafka.SASL{}, false},
		{"wrong password", wrong, false},
		{"other user", kafka.SASL{Mechanism: login.Mechanism, User: "admin", Password: "admin"}, false},
		{"generated login", login, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ping(e.Addr(), tc.login); (err == nil) != tc.ok {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// The client with the login can really work, not just connect.
	c := kafka.Config{Brokers: []string{e.Addr()}, Partitions: 1, TopicPrefix: "sasl.", SASL: login}
	if err := kafka.EnsureTopics(context.Background(), c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	addr := e.Addr()
	e.Close()

	path := filepath.Join(dir, kafka.ClientPropertiesFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %#o, want 0600", path, fi.Mode().Perm())
	}
	props, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanisms=SCRAM-SHA-256", "sasl.username=" + login.User, "sasl.password=" + login.Password} {
		if !strings.Contains(string(props), want+"\n") {
			t.Fatalf("%s lacks %q", path, want)
		}
	}
	again, err := kafka.StartEmbedded(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.SASL() != login {
		t.Fatal("the login changed across a restart")
	}
	if err := ping(again.Addr(), login); err != nil {
		t.Fatal(err)
	}
	// In memory, each start makes its own login.
	mem, err := kafka.StartEmbedded("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if mem.SASL() == login || ping(mem.Addr(), login) == nil {
		t.Fatal("an in-memory broker reused the login of another")
	}
}

// Every mechanism a Config can name logs in to a broker that has the user.
func TestSASLMechanisms(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(kafka.SASLPlain, "plain", "pw-plain"),
		kfake.Superuser(kafka.SASLScramSHA256, "s256", "pw-256"),
		kfake.Superuser(kafka.SASLScramSHA512, "s512", "pw-512"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	tests := []struct {
		login kafka.SASL
		ok    bool
	}{
		{kafka.SASL{Mechanism: kafka.SASLPlain, User: "plain", Password: "pw-plain"}, true},
		{kafka.SASL{Mechanism: kafka.SASLScramSHA256, User: "s256", Password: "pw-256"}, true},
		{kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: "s512", Password: "pw-512"}, true},
		{kafka.SASL{Mechanism: kafka.SASLPlain, User: "plain", Password: "nope"}, false},
		{kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: "s512", Password: "nope"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.login.Mechanism+"/"+tc.login.Password, func(t *testing.T) {
			if err := ping(addr, tc.login); (err == nil) != tc.ok {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestConfigValidatesSASL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sasl kafka.SASL
		errs []string
	}{
		{"none", kafka.SASL{}, nil},
		{"scram", kafka.SASL{Mechanism: kafka.SASLScramSHA512, User: "u", Password: "p"}, nil},
		{"unknown mechanism", kafka.SASL{Mechanism: "GSSAPI", User: "u", Password: "p"}, []string{"GSSAPI"}},
		{"missing user and password", kafka.SASL{Mechanism: kafka.SASLPlain}, []string{"user is required", "password is required"}},
		{"credentials without mechanism", kafka.SASL{User: "u"}, []string{"without a mechanism"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := kafka.Config{Brokers: []string{"b:9092"}, Partitions: 1, SASL: tc.sasl}.Validate()
			if (err == nil) != (len(tc.errs) == 0) {
				t.Fatalf("Validate: %v", err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%q lacks %q", err, want)
				}
			}
			if err != nil && strings.Contains(err.Error(), "\"p\"") {
				t.Fatal("the password is in the error")
			}
		})
	}
}

// A batch with one record the producer cannot send reports which one; the
// others are stored.
func TestPublishReportsTheFirstFailedMessage(t *testing.T) {
	t.Parallel()
	c := testenv.Kafka(t, 2)
	if err := kafka.EnsureTopics(context.Background(), c, testenv.Quiet(), kafka.TopicEvents); err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []*message.Message
	for i := range 5 {
		body := []byte("small")
		if i == 2 {
			body = make([]byte, 2<<20) // above the producer's 1 MiB
		}
		m := message.NewMessage(string(rune('a'+i)), body)
		m.Metadata.Set("stream", string(rune('a'+i)))
		msgs = append(msgs, m)
	}
	err = pub.Publish(c.Topic(kafka.TopicEvents), msgs...)
	var pe *kafka.PublishError
	if !errors.As(err, &pe) || pe.FirstFailed() != 2 || len(pe.Failed) != 1 {
		t.Fatalf("got %v, want a publish error at index 2 only", err)
	}
	if got := testenv.ReadTopic(t, c, c.Topic(kafka.TopicEvents), 4, 10*time.Second); len(got) != 4 {
		t.Fatalf("%d records stored, want the 4 others", len(got))
	}
}

// librdkafka (kcat) logs in only to a broker that lists SaslHandshake from
// version 0; the embedded broker does, and still serves its clients.
func TestEmbeddedBrokerListsHandshakeForLibrdkafka(t *testing.T) {
	t.Parallel()
	e, err := kafka.StartEmbedded("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	for _, version := range []int16{0, 3} {
		b := sarama.NewBroker(e.Addr())
		if err := b.Open(cfg); err != nil {
			t.Fatal(err)
		}
		resp, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: version, ClientSoftwareName: "kcat", ClientSoftwareVersion: "1.7.1"})
		_ = b.Close()
		if err != nil {
			t.Fatal(err)
		}
		found := map[int16][2]int16{}
		for _, k := range resp.ApiKeys {
			found[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
		if r, ok := found[17]; !ok || r[0] != 0 || r[1] < 1 {
			t.Fatalf("ApiVersions v%d lists SaslHandshake as %v, want from 0", version, r)
		}
		if r, ok := found[0]; !ok || r[1] < 3 { // Produce, as the broker serves it
			t.Fatalf("ApiVersions v%d lists Produce as %v", version, r)
		}
	}
	if err := ping(e.Addr(), e.SASL()); err != nil {
		t.Fatal(err)
	}
}
