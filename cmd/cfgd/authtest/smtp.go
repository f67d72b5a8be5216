package authtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Message is one captured e-mail, decoded.
type Message struct {
	From    string
	To      []string
	Subject string
	Text    string
	HTML    string
	Raw     []byte
}

var codeRE = regexp.MustCompile(`\b(\d{6})\b`)

// Code is the 6-digit code in the text part.
func (m Message) Code() string {
	if c := codeRE.FindStringSubmatch(m.Text); c != nil {
		return c[1]
	}
	return ""
}

// SMTPServer is an in-process SMTP server that keeps what it receives.
type SMTPServer struct {
	Host, Port string
	fail       atomic.Bool

	mu       sync.Mutex
	msgs     []Message
	byTo     map[string][]int // lower-cased recipient -> indexes into msgs
	rejected []Message
}

// StartSMTP listens on a free loopback port until t ends.
func StartSMTP(t testing.TB) *SMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SMTPServer{byTo: map[string][]int{}}
	s.Host, s.Port, _ = net.SplitHostPort(ln.Addr().String())
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{srv: s}, nil }))
	srv.Domain = "localhost"
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	srv.MaxMessageBytes = 1 << 20
	srv.AllowInsecureAuth = true
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// FailDelivery makes the server refuse every message (fail=true) or accept
// them again.
func (s *SMTPServer) FailDelivery(fail bool) { s.fail.Store(fail) }

// Messages returns everything received so far.
func (s *SMTPServer) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Rejected returns the messages refused while FailDelivery was on: what a
// real provider never delivered, which tests use to prove such a code is
// void.
func (s *SMTPServer) Rejected() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.rejected...)
}

// Count of messages sent to addr.
func (s *SMTPServer) Count(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byTo[strings.ToLower(addr)])
}

// Last returns the newest message to addr.
func (s *SMTPServer) Last(addr string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.byTo[strings.ToLower(addr)]
	if len(idx) == 0 {
		return Message{}, false
	}
	return s.msgs[idx[len(idx)-1]], true
}

func (s *SMTPServer) add(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, m)
	for _, to := range m.To {
		k := strings.ToLower(to)
		s.byTo[k] = append(s.byTo[k], len(s.msgs)-1)
	}
}

type smtpSession struct {
	srv  *SMTPServer
	from string
	to   []string
}

func (x *smtpSession) Reset()        { x.from, x.to = "", nil }
func (x *smtpSession) Logout() error { return nil }
func (x *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	x.from = from
	return nil
}

func (x *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.to = append(x.to, to)
	return nil
}

func (x *smtpSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m, err := parse(raw)
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: err.Error()}
	}
	m.From, m.To = x.from, append([]string(nil), x.to...)
	if x.srv.fail.Load() {
		x.srv.mu.Lock()
		x.srv.rejected = append(x.srv.rejected, m)
		x.srv.mu.Unlock()
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "mailbox unavailable (test)"}
	}
	x.srv.add(m)
	return nil
}

func parse(raw []byte) (Message, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Message{}, err
	}
	dec := new(mime.WordDecoder)
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		return Message{}, err
	}
	out := Message{Subject: subject, Raw: raw}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		return Message{}, fmt.Errorf("want multipart/alternative, got %q", msg.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Message{}, err
		}
		// NextPart already decodes quoted-printable.
		b, err := io.ReadAll(p)
		if err != nil {
			return Message{}, err
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch ct {
		case "text/plain":
			out.Text = string(b)
		case "text/html":
			out.HTML = string(b)
		}
	}
	return out, nil
}

// PortNumber is Port as a number.
func (s *SMTPServer) PortNumber() int {
	n, _ := strconv.Atoi(s.Port)
	return n
}
