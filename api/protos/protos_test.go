package protos_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/cfgd/cfgd/api/protos"
	_ "github.com/cfgd/cfgd/api/protos/cfgd/apikeys/v1"
	_ "github.com/cfgd/cfgd/api/protos/cfgd/auth/v1"
	_ "github.com/cfgd/cfgd/api/protos/cfgd/ingest/v1"
	_ "github.com/cfgd/cfgd/api/protos/cfgd/monitor/v1"
	"github.com/cfgd/cfgd/deploy/buildinfo"
)

// The committed Go code is what `make proto` makes from the committed
// .proto files with the pinned plugins; edit a .proto without
// regenerating and this fails.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Fatal("protoc is required (Debian protobuf-compiler; deploy/scripts/local/stack.sh up installs it)")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "generate.sh")
	cmd.Env = append(os.Environ(), "PROTO_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, b)
	}
	var fresh []string
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		fresh = append(fresh, rel)
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(rel)
		if err != nil {
			t.Errorf("%s is not committed: run make proto", rel)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make proto", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// And nothing generated is left over from a deleted .proto.
	err = filepath.WalkDir("cfgd", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		found := false
		for _, f := range fresh {
			found = found || f == p
		}
		if !found {
			t.Errorf("%s has no .proto behind it: delete it or run make proto", p)
		}
		return nil
	})
	if err != nil || len(fresh) == 0 {
		t.Fatalf("walked %d files: %v", len(fresh), err)
	}
}

// Parse counts what the compiled descriptors hold.
func TestParseAgreesWithDescriptors(t *testing.T) {
	t.Parallel()
	src, err := protos.Sources()
	if err != nil || len(src) < 2 {
		t.Fatalf("sources %v: %v", src, err)
	}
	for _, s := range src {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(s.Path)
		if err != nil {
			t.Fatalf("%s: %v", s.Path, err)
		}
		var count func(ms protoreflect.MessageDescriptors) int
		count = func(ms protoreflect.MessageDescriptors) int {
			n := 0
			for i := range ms.Len() {
				if !ms.Get(i).IsMapEntry() {
					n += 1 + count(ms.Get(i).Messages())
				}
			}
			return n
		}
		got := protos.Parse(s.Content)
		if got.Package != string(fd.Package()) || got.Messages != count(fd.Messages()) || got.Services != fd.Services().Len() {
			t.Errorf("%s: parsed %+v, descriptor has package %s, %d messages, %d services", s.Path, got, fd.Package(), count(fd.Messages()), fd.Services().Len())
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want protos.Info
	}{
		{"empty", "", protos.Info{}},
		{"plain", "syntax = \"proto3\";\npackage a.b.v1;\nmessage A {}\nmessage B { message C {} }\nservice S { rpc X(A) returns (B); }", protos.Info{"a.b.v1", 3, 1}},
		{"comments and strings", "package p; // message Fake {\n/* service Fake { */ option x = \"message Y {\";\nmessage Real {}", protos.Info{"p", 1, 0}},
		{"field named message", "package p; message M { string message = 1; Msg service = 2; }", protos.Info{"p", 1, 0}},
		{"no space before brace", "package p;message M{}service S{}", protos.Info{"p", 1, 1}},
		{"unterminated comment", "package p; message A {} /* message B {}", protos.Info{"p", 1, 0}},
	}
	for _, tc := range tests {
		if got := protos.Parse([]byte(tc.src)); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCheckLabel(t *testing.T) {
	t.Parallel()
	for label, ok := range map[string]bool{
		"apikeys": true, "monitor_v2": true, "": false, "..": false, "a/b": false, `a\b`: false, "a..b": false,
		"A": false, "1a": false, "a b": false, "a\x00": false, strings.Repeat("a", 65): false,
	} {
		if err := protos.CheckLabel(label); (err == nil) != ok {
			t.Errorf("%q: %v", label, err)
		}
	}
}

// The image make lint checks breaking changes against (buf breaking) is
// there for the release every build reports, and holds every public proto
// file: a release cut without `make protos-release` would leave lint
// comparing against an older release, and a new proto file unchecked.
func TestReleaseImageHoldsEveryProto(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("releases", "v"+buildinfo.Release+".binpb"))
	if err != nil {
		t.Fatalf("%v: run make protos-release when cutting release %s", err, buildinfo.Release)
	}
	// A buf image is wire-compatible with a FileDescriptorSet.
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, f := range set.GetFile() {
		in[f.GetName()] = true
	}
	err = filepath.WalkDir("cfgd", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") && !in[filepath.ToSlash(path)] {
			t.Errorf("%s is not in the image of release %s: a proto added since is not checked by buf breaking until the next release's image", path, buildinfo.Release)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
