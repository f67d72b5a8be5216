// Package mail sends cfgd's e-mail: a console backend for development that
// prints each message, and an SMTP backend.
package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one e-mail with a plain-text and an HTML body.
type Message struct {
	To      string
	Subject string
	Text    string
	HTML    string
}

// Sender delivers a message or says why it could not.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// Console prints every message to W. It is for development only: the
// message, one-time codes included, lands in the process output.
type Console struct {
	From string
	W    io.Writer
	mu   sync.Mutex
}

// Send prints m.
func (c *Console) Send(_ context.Context, m Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := fmt.Fprintf(c.W, "----- e-mail (console backend) -----\nFrom: %s\nTo: %s\nSubject: %s\n\n%s\n------------------------------------\n",
		c.From, m.To, m.Subject, strings.TrimRight(m.Text, "\n"))
	if err != nil {
		return fmt.Errorf("console mail: %w", err)
	}
	return nil
}

// Security of the SMTP connection.
const (
	SecurityNone     = "none"     // plain text; for a relay on the same host
	SecurityStartTLS = "starttls" // upgrade, refusing servers that cannot
	SecurityTLS      = "tls"      // implicit TLS (port 465)
)

// SMTP sends through one server. Connections are kept open and reused for
// later messages (one SMTP session can carry many transactions), which
// spares a TCP and TLS handshake, EHLO and AUTH per code sent.
type SMTP struct {
	Host     string
	Port     int
	From     string
	Username string // empty: no AUTH
	Password string
	Security string
	Timeout  time.Duration // bounds the whole exchange; default 10s
	// TLSConfig overrides the default (verify Host); tests use it.
	TLSConfig *tls.Config
	// MaxIdle bounds the connections kept open between messages; default 8.
	MaxIdle int
	// IdleTimeout drops a kept connection unused for this long, before the
	// server would; default 20s.
	IdleTimeout time.Duration

	mu   sync.Mutex
	idle []*smtpConn
}

type smtpConn struct {
	c     *smtp.Client
	conn  net.Conn
	since time.Time
}

// Send delivers m, or fails within the timeout.
func (s *SMTP) Send(ctx context.Context, m Message) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := Render(s.From, m, time.Now())
	if err != nil {
		return err
	}
	if sc := s.take(); sc != nil {
		sent, err := s.transact(ctx, sc, m.To, body)
		if err == nil {
			return nil
		}
		if sent {
			return err
		}
		// The kept connection had gone stale before the server took the
		// message: it is safe to try once on a fresh one.
	}
	sc, err := s.dial(ctx)
	if err != nil {
		return err
	}
	_, err = s.transact(ctx, sc, m.To, body)
	return err
}

// transact runs one mail transaction on sc and keeps sc for reuse when it
// went well. sent reports whether the server may have taken the message
// (the failure came at or after DATA), in which case a retry could deliver
// it twice.
func (s *SMTP) transact(ctx context.Context, sc *smtpConn, to string, body []byte) (sent bool, err error) {
	deadline, _ := ctx.Deadline()
	_ = sc.conn.SetDeadline(deadline)
	// The client has no context support: the deadline bounds every command,
	// and closing on cancel unblocks it at once.
	stop := context.AfterFunc(ctx, func() { _ = sc.conn.Close() })
	defer stop()
	addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	if err := sc.c.Mail(s.From, nil); err != nil {
		sc.c.Close()
		return false, fmt.Errorf("smtp %s: %w", addr, err)
	}
	if err := sc.c.Rcpt(to, nil); err != nil {
		s.resetOrClose(sc)
		return false, fmt.Errorf("smtp %s: %w", addr, err)
	}
	w, err := sc.c.Data()
	if err != nil {
		s.resetOrClose(sc)
		return false, fmt.Errorf("smtp %s: %w", addr, err)
	}
	if _, err := w.Write(body); err != nil {
		sc.c.Close()
		return true, fmt.Errorf("smtp %s: %w", addr, err)
	}
	if err := w.Close(); err != nil {
		// A refusal after DATA leaves the session usable; a network error
		// does not, and resetOrClose tells them apart.
		s.resetOrClose(sc)
		return true, fmt.Errorf("smtp %s: %w", addr, err)
	}
	if !stop() || ctx.Err() != nil {
		sc.c.Close()
		return true, nil
	}
	s.put(sc)
	return true, nil
}

// resetOrClose keeps sc after a refused command if RSET still works.
func (s *SMTP) resetOrClose(sc *smtpConn) {
	if err := sc.c.Reset(); err != nil {
		sc.c.Close()
		return
	}
	s.put(sc)
}

func (s *SMTP) dial(ctx context.Context) (*smtpConn, error) {
	addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	tlsCfg := s.TLSConfig
	if tlsCfg == nil {
		tlsCfg = &tls.Config{ServerName: s.Host, MinVersion: tls.VersionTLS12}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("smtp %s: %w", addr, err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	var c *smtp.Client
	switch s.Security {
	case SecurityTLS:
		tc := tls.Client(conn, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("smtp %s: tls: %w", addr, err)
		}
		conn, c = tc, smtp.NewClient(tc)
	case SecurityStartTLS:
		c, err = smtp.NewClientStartTLS(conn, tlsCfg)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("smtp %s: starttls: %w", addr, err)
		}
	default:
		c = smtp.NewClient(conn)
	}
	if s.Username != "" {
		if err := c.Auth(sasl.NewPlainClient("", s.Username, s.Password)); err != nil {
			c.Close()
			return nil, fmt.Errorf("smtp %s: auth: %w", addr, err)
		}
	}
	return &smtpConn{c: c, conn: conn}, nil
}

func (s *SMTP) take() *smtpConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.idle) > 0 {
		sc := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if time.Since(sc.since) < s.idleTimeout() {
			return sc
		}
		go sc.quit()
	}
	return nil
}

func (s *SMTP) put(sc *smtpConn) {
	_ = sc.conn.SetDeadline(time.Time{})
	sc.since = time.Now()
	max := s.MaxIdle
	if max <= 0 {
		max = 8
	}
	s.mu.Lock()
	if len(s.idle) < max {
		s.idle = append(s.idle, sc)
		sc = nil
	}
	s.mu.Unlock()
	if sc != nil {
		sc.quit()
	}
}

// quit ends the session politely, but never waits long for it.
func (sc *smtpConn) quit() {
	_ = sc.conn.SetDeadline(time.Now().Add(2 * time.Second))
	_ = sc.c.Quit()
	_ = sc.c.Close()
}

func (s *SMTP) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return 20 * time.Second
}

// Close ends the kept connections.
func (s *SMTP) Close() error {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, sc := range idle {
		sc.quit()
	}
	return nil
}

// Render builds the RFC 5322 message: multipart/alternative with a
// quoted-printable text part and HTML part, CRLF line endings.
func Render(from string, m Message, now time.Time) ([]byte, error) {
	for _, h := range []string{from, m.To, m.Subject} {
		if strings.ContainsAny(h, "\r\n") {
			return nil, errors.New("mail: header value contains a line break")
		}
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	domain := "localhost"
	if at := strings.LastIndexByte(from, '@'); at >= 0 {
		domain = from[at+1:]
	}
	hdr := []string{
		"From: " + from,
		"To: " + m.To,
		"Subject: " + mime.QEncoding.Encode("utf-8", m.Subject),
		"Date: " + now.UTC().Format(time.RFC1123Z),
		"Message-ID: <" + hex.EncodeToString(id) + "@" + domain + ">",
		"MIME-Version: 1.0",
		"Content-Type: multipart/alternative; boundary=" + mw.Boundary(),
	}
	buf.WriteString(strings.Join(hdr, "\r\n") + "\r\n\r\n")
	for _, part := range []struct{ ctype, body string }{
		{"text/plain; charset=utf-8", m.Text},
		{"text/html; charset=utf-8", m.HTML},
	} {
		w, err := mw.CreatePart(textproto.MIMEHeader{
			"Content-Type":              {part.ctype},
			"Content-Transfer-Encoding": {"quoted-printable"},
		})
		if err != nil {
			return nil, fmt.Errorf("mail: %w", err)
		}
		qp := quotedprintable.NewWriter(w)
		if _, err := qp.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(part.body, "\r\n", "\n"), "\n", "\r\n"))); err != nil {
			return nil, fmt.Errorf("mail: %w", err)
		}
		if err := qp.Close(); err != nil {
			return nil, fmt.Errorf("mail: %w", err)
		}
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	return buf.Bytes(), nil
}
