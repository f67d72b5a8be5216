package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverPrinted(t *testing.T) {
	const value = "s3cr3t-value-do-not-print"
	s := NewSecret(value)
	type keys struct {
		CryptoAPIKey        Secret `json:"crypto_api_key"`
		CryptoWebhookSecret Secret `json:"crypto_webhook_secret"`
	}
	holder := struct {
		Key   Secret
		Inner *keys
	}{s, &keys{CryptoAPIKey: s, CryptoWebhookSecret: s}}

	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", s, "holder", holder, "payments", *holder.Inner)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", s, "holder", holder, "payments", *holder.Inner)
	jsonBytes, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := s.MarshalText()

	outputs := map[string]string{
		"%s": fmt.Sprintf("%s", s), "%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s),
		"%#v": fmt.Sprintf("%#v", s), "%q": fmt.Sprintf("%q", s), "%d": fmt.Sprintf("%d", s),
		"%x": fmt.Sprintf("%x", s), "%X": fmt.Sprintf("%X", s), "%10.3s": fmt.Sprintf("%10.3s", s),
		"struct %v": fmt.Sprintf("%v", holder), "struct %+v": fmt.Sprintf("%+v", holder),
		"struct %#v": fmt.Sprintf("%#v", holder), "pointer %+v": fmt.Sprintf("%+v", holder.Inner),
		"Sprint": fmt.Sprint(s, holder), "Println": fmt.Sprintln(s),
		"wrapped error": fmt.Errorf("load: %v: %w", s, errors.New("x")).Error(),
		"slog":          logs.String(), "json": string(jsonBytes), "text": string(text),
		"String": s.String(), "GoString": s.GoString(),
	}
	for name, out := range outputs {
		if strings.Contains(out, value) || strings.Contains(out, "s3cr3t") || strings.Contains(out, hexOf(value)[:12]) {
			t.Errorf("%s shows the secret: %s", name, out)
		}
	}
	if outputs["%s"] != Masked || outputs["%q"] != `"****"` || string(jsonBytes) != `{"Key":"****","Inner":{"crypto_api_key":"****","crypto_webhook_secret":"****"}}` {
		t.Errorf("masking: %s %s %s", outputs["%s"], outputs["%q"], jsonBytes)
	}
	if s.Reveal() != value || !s.IsSet() {
		t.Error("Reveal must give the value back")
	}
}

func TestSecretUnset(t *testing.T) {
	var s Secret
	b, _ := json.Marshal(s)
	if string(b) != `""` || s.String() != "" || s.IsSet() || fmt.Sprint(s) != "" {
		t.Fatalf("unset secret shows %s / %q", b, s.String())
	}
}

func hexOf(s string) string { return fmt.Sprintf("%x", s) }
