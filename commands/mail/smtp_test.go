package mail_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/cfgd/cfgd/commands/mail"
)

type sink struct {
	mu       sync.Mutex
	got      []string
	tls      []bool
	sessions int
	conns    []*smtp.Conn
}

type session struct {
	s    *sink
	conn *smtp.Conn
}

func (x *session) Reset()                                    {}
func (x *session) Logout() error                             { return nil }
func (x *session) Mail(string, *smtp.MailOptions) error      { return nil }
func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error { return nil }
func (x *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	_, isTLS := x.conn.TLSConnectionState()
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	x.s.got = append(x.s.got, string(b))
	x.s.tls = append(x.s.tls, isTLS)
	return nil
}

func startServer(t *testing.T, tlsCfg *tls.Config) (*sink, string, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		s.mu.Lock()
		s.sessions++
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		return &session{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.TLSConfig = tlsCfg
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	return s, host, p
}

func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

func TestSMTPSend(t *testing.T) {
	msg := mail.Message{To: "a@example.com", Subject: "Your verification code", Text: "code 123456", HTML: "<b>123456</b>"}
	t.Run("starttls", func(t *testing.T) {
		srvTLS, roots := selfSigned(t)
		s, host, port := startServer(t, srvTLS)
		m := &mail.SMTP{Host: host, Port: port, From: "f@example.com", Security: mail.SecurityStartTLS,
			TLSConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}
		if err := m.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		if len(s.got) != 1 || !s.tls[0] || !strings.Contains(s.got[0], "123456") {
			t.Fatalf("got %v tls %v", len(s.got), s.tls)
		}
	})
	t.Run("starttls refuses a server without TLS", func(t *testing.T) {
		s, host, port := startServer(t, nil)
		m := &mail.SMTP{Host: host, Port: port, From: "f@example.com", Security: mail.SecurityStartTLS}
		if err := m.Send(context.Background(), msg); err == nil || len(s.got) != 0 {
			t.Fatalf("sent in clear text: %v", err)
		}
	})
	t.Run("plain", func(t *testing.T) {
		s, host, port := startServer(t, nil)
		m := &mail.SMTP{Host: host, Port: port, From: "f@example.com", Security: mail.SecurityNone}
		if err := m.Send(context.Background(), msg); err != nil || len(s.got) != 1 {
			t.Fatalf("%v", err)
		}
	})
	t.Run("connections are reused, and a stale one replaced", func(t *testing.T) {
		s, host, port := startServer(t, nil)
		m := &mail.SMTP{Host: host, Port: port, From: "f@example.com", Security: mail.SecurityNone}
		defer m.Close()
		for range 3 {
			if err := m.Send(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
		}
		s.mu.Lock()
		sessions, conns := s.sessions, append([]*smtp.Conn(nil), s.conns...)
		s.mu.Unlock()
		if sessions != 1 || len(s.got) != 3 {
			t.Fatalf("%d sessions for %d messages", sessions, len(s.got))
		}
		// The server drops the kept connection; the next send redials.
		_ = conns[0].Close()
		time.Sleep(50 * time.Millisecond)
		if err := m.Send(context.Background(), msg); err != nil {
			t.Fatalf("after the server closed the connection: %v", err)
		}
		if len(s.got) != 4 {
			t.Fatalf("%d messages", len(s.got))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never greets
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		p, _ := strconv.Atoi(port)
		m := &mail.SMTP{Host: host, Port: p, From: "f@example.com", Security: mail.SecurityNone, Timeout: 300 * time.Millisecond}
		start := time.Now()
		if err := m.Send(context.Background(), msg); err == nil || time.Since(start) > 3*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}
