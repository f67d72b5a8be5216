package otp

import (
	"bytes"
	"embed"
	"fmt"
	htmltemplate "html/template"
	texttemplate "text/template"

	"github.com/cfgd/cfgd/commands/mail"
)

// Subject of the OTP e-mail (docs/api.md, passwordless sign-in).
const Subject = "Your verification code"

//go:embed templates/otp.txt templates/otp.html
var templateFS embed.FS

// Templates render the OTP e-mail with the variables otp_code and
// expiry_minutes.
type Templates struct {
	text *texttemplate.Template
	html *htmltemplate.Template
}

// ParseTemplates parses the embedded templates.
func ParseTemplates() (*Templates, error) {
	t, err := texttemplate.New("otp.txt").Option("missingkey=error").ParseFS(templateFS, "templates/otp.txt")
	if err != nil {
		return nil, fmt.Errorf("otp text template: %w", err)
	}
	h, err := htmltemplate.New("otp.html").Option("missingkey=error").ParseFS(templateFS, "templates/otp.html")
	if err != nil {
		return nil, fmt.Errorf("otp html template: %w", err)
	}
	return &Templates{text: t, html: h}, nil
}

// Message renders the e-mail carrying code to email.
func (t *Templates) Message(email, code string) (mail.Message, error) {
	vars := map[string]any{"otp_code": code, "expiry_minutes": int(CodeTTL.Minutes())}
	var text, html bytes.Buffer
	if err := t.text.Execute(&text, vars); err != nil {
		return mail.Message{}, fmt.Errorf("render otp text: %w", err)
	}
	if err := t.html.Execute(&html, vars); err != nil {
		return mail.Message{}, fmt.Errorf("render otp html: %w", err)
	}
	return mail.Message{To: email, Subject: Subject, Text: text.String(), HTML: html.String()}, nil
}
