package main

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// A request in flight when the stop signal comes completes with its real
// answer: HTTP drains before anything else stops. The request is kept in
// flight by sending its body in two parts, the second after the stop.
func TestStopDrainsARequestInFlight(t *testing.T) {
	baseEnv(t, testenv.PostgresURL(t))
	r := start(t)
	waitStatus(t, r.base+"/readyz", 200)

	conn, err := net.Dial("tcp", strings.TrimPrefix(r.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"identifier": "not-an-address"}`
	head := "POST /api/auth/otp/request/ HTTP/1.1\r\nHost: cfgd\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := conn.Write([]byte(head + body[:10])); err != nil {
		t.Fatal(err)
	}
	// Let the handler start reading the body, then stop the server.
	time.Sleep(300 * time.Millisecond)
	r.cancel()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-r.done:
		t.Fatalf("serve returned with a request in flight: %v", err)
	default:
	}
	if _, err := conn.Write([]byte(body[10:])); err != nil {
		t.Fatalf("the connection was closed under the request: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the request in flight: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("request in flight: %d, want its real answer 400", resp.StatusCode)
	}
	r.stop(t)
	if !strings.Contains(r.stderr.String(), `"msg":"cfgd stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", r.stderr)
	}
}

// "cfgd stopped" means a clean stop: a server that fails does not say it.
func TestFailedServeDoesNotClaimACleanStop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	baseEnv(t, testenv.PostgresURL(t))
	t.Setenv("HTTP__ADDR", ln.Addr().String())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), []string{"serve"}, stdout, stderr) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "listen") {
			t.Fatalf("serve on a taken port: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve on a taken port did not fail")
	}
	if strings.Contains(stderr.String(), "cfgd stopped") {
		t.Fatalf("a failed serve logged a clean stop:\n%s", stderr)
	}
}
