package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events/kafka"
)

// cfgd broker serves the embedded broker alone: a client with the login
// from its client.properties reaches it at the address it prints, the
// password is not printed, and it stops cleanly on cancel. (deploy/faults
// runs serve against it and stops it under load.)
func TestBrokerCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CFGD_ENV_FILE", dir+"/none.env")
	t.Setenv("KAFKA__DATA_DIR", dir+"/kafka")
	t.Setenv("KAFKA__EMBEDDED_ADDR", "127.0.0.1:0")
	// Ignored: one settings file serves the broker and its clients.
	t.Setenv("KAFKA__BROKERS", "127.0.0.1:1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"broker"}, stdout, stderr) }()

	addrLine := regexp.MustCompile(`(?m)^\s+kafka\s+(\S+)$`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := addrLine.FindStringSubmatch(stdout.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no address printed; stdout %q stderr %q", stdout.String(), stderr.String())
	}
	login, err := kafka.ReadEmbeddedLogin(dir + "/kafka")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String()+stderr.String(), login.Password) {
		t.Error("cfgd broker printed the broker's password")
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if err := kafka.Ping(pctx, kafka.Config{Brokers: []string{addr}, SASL: login}); err != nil {
		t.Fatalf("a client with the login of client.properties: %v", err)
	}
	bad := login
	bad.Password = "wrong"
	if err := kafka.Ping(pctx, kafka.Config{Brokers: []string{addr}, SASL: bad}); err == nil {
		t.Error("the broker let in a wrong password")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cfgd broker: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cfgd broker did not stop on cancel")
	}
}
