package mail_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/commands/mail"
)

func TestRender(t *testing.T) {
	b, err := mail.Render("no-reply@example.com", mail.Message{
		To: "a@example.com", Subject: "Your verification code — ünïcode", Text: "Code 123456\nline two", HTML: "<p>Code <b>123456</b></p>",
	}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"From: no-reply@example.com\r\n", "To: a@example.com\r\n", "Subject: =?utf-8?q?", "MIME-Version: 1.0\r\n",
		"Content-Type: multipart/alternative; boundary=", "Content-Type: text/plain; charset=utf-8", "Content-Type: text/html; charset=utf-8",
		"Code 123456\r\nline two", "Date: Fri, 02 Jan 2026 03:04:05 +0000\r\n", "@example.com>\r\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("message lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(strings.ReplaceAll(s, "\r\n", ""), "\n") {
		t.Error("bare LF in the message")
	}
	if _, err := mail.Render("x@y.z", mail.Message{To: "a@b.c\r\nBcc: victim@x.y", Subject: "s"}, time.Now()); err == nil {
		t.Error("header injection accepted")
	}
}

func TestConsole(t *testing.T) {
	var buf bytes.Buffer
	c := &mail.Console{From: "f@x.y", W: &buf}
	if err := c.Send(context.Background(), mail.Message{To: "a@b.c", Subject: "Your verification code", Text: "Your code is 123456\n"}); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "To: a@b.c") || !strings.Contains(out, "Subject: Your verification code") || !strings.Contains(out, "123456") {
		t.Fatalf("console output:\n%s", out)
	}
}
