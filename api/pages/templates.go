package pages

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
)

// The staff pages are plain HTML templates; their styles and scripts are
// shared static assets (assets/), served from the binary with the other
// pages' cache headers: no CDN, no build step.
//
//go:embed templates/*.html
var templates embed.FS

func renderFile(name string, data any) ([]byte, error) {
	t, err := template.ParseFS(templates, name)
	if err != nil {
		return nil, fmt.Errorf("page %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("page %s: %w", name, err)
	}
	return b.Bytes(), nil
}
