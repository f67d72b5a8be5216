// Package otpmail is an in-process SMTP server standing in for the users'
// inboxes: cfgd's OTP mail is sent to it (Env) and each address's last code
// is taken from it (Code). The fault tests, make chaos and make soak drive
// sign-ins through it.
package otpmail

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/emersion/go-smtp"
)

// Inbox keeps the last OTP code sent to each address.
type Inbox struct {
	mu    sync.Mutex
	codes map[string]string
	wake  chan struct{}
	port  int
	srv   *smtp.Server
}

var otpCode = regexp.MustCompile(`verification code is (\d{6})`)

// Start serves SMTP on a free loopback port until Close.
func Start() (*Inbox, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otp inbox: %w", err)
	}
	m := &Inbox{codes: map[string]string{}, wake: make(chan struct{}), port: ln.Addr().(*net.TCPAddr).Port}
	m.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &session{m: m}, nil }))
	m.srv.Domain = "localhost"
	m.srv.AllowInsecureAuth = true
	// A killed cfgd resets its connections: that is the run, not news.
	m.srv.ErrorLog = log.New(io.Discard, "", 0)
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// Close stops the server.
func (m *Inbox) Close() { _ = m.srv.Close() }

// Env are the mail settings that send cfgd's e-mail here.
func (m *Inbox) Env() map[string]string {
	return map[string]string{
		"EMAIL__BACKEND": "smtp", "EMAIL__SMTP_HOST": "127.0.0.1", "EMAIL__SMTP_PORT": strconv.Itoa(m.port),
		"EMAIL__SMTP_SECURITY": "none", "EMAIL__FROM": "cfgd@example.com",
	}
}

// Code takes the code sent to email, waiting for it until ctx ends.
func (m *Inbox) Code(ctx context.Context, email string) (string, error) {
	email = strings.ToLower(email)
	for {
		m.mu.Lock()
		c, ok := m.codes[email]
		if ok {
			delete(m.codes, email)
		}
		wake := m.wake
		m.mu.Unlock()
		if ok {
			return c, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return "", fmt.Errorf("no code for %s: %w", email, ctx.Err())
		}
	}
}

type session struct {
	m  *Inbox
	to []string
}

func (s *session) Reset()                                    { s.to = nil }
func (s *session) Logout() error                             { return nil }
func (s *session) Mail(string, *smtp.MailOptions) error      { return nil }
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error { s.to = append(s.to, to); return nil }
func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return err
	}
	// The text part is quoted-printable; a six-digit code survives it.
	m := otpCode.FindSubmatch(b)
	if m == nil {
		return nil
	}
	s.m.mu.Lock()
	for _, to := range s.to {
		s.m.codes[strings.ToLower(to)] = string(m[1])
	}
	close(s.m.wake)
	s.m.wake = make(chan struct{})
	s.m.mu.Unlock()
	return nil
}
