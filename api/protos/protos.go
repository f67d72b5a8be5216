// Package protos holds the .proto sources of cfgd's gRPC services, one
// package per app under cfgd/<app>/v1/, with the Go code generated from
// them beside each file (`make proto`). The sources are embedded in the
// binary: the proto-file endpoints write them into GRPC__PROTO_DIR and
// serve them from there, so client developers fetch exactly what the
// server was built from.
package protos

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed cfgd
var sources embed.FS

// Source is one app's embedded .proto file.
type Source struct {
	AppLabel string // "apikeys"
	Path     string // "cfgd/apikeys/v1/apikeys.proto", the import path
	Content  []byte
}

// Filename is the file's base name.
func (s Source) Filename() string { return path.Base(s.Path) }

// Sources returns every app's file, by label.
func Sources() ([]Source, error) {
	var out []Source
	err := fs.WalkDir(sources, "cfgd", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".proto") {
			return err
		}
		b, err := sources.ReadFile(p)
		if err != nil {
			return err
		}
		// cfgd/<app>/v1/<file>.proto
		parts := strings.Split(p, "/")
		if len(parts) != 4 {
			return fmt.Errorf("protos: %s is not cfgd/<app>/<version>/<file>.proto", p)
		}
		out = append(out, Source{AppLabel: parts[1], Path: p, Content: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("protos: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppLabel < out[j].AppLabel })
	for i := 1; i < len(out); i++ {
		if out[i].AppLabel == out[i-1].AppLabel {
			return nil, fmt.Errorf("protos: app %s has more than one file", out[i].AppLabel)
		}
	}
	return out, nil
}
