package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cfgd/cfgd/events"
	"github.com/cfgd/cfgd/events/apikey"
	"github.com/cfgd/cfgd/events/catalog"
	"github.com/cfgd/cfgd/events/requestlog"
	"github.com/cfgd/cfgd/events/tasks"
)

// -corpus.write (go generate ./events/catalog) adds the samples of the
// current versions that the corpus lacks and the current schema level's
// line; it never changes a sample already there.
var write = flag.Bool("corpus.write", false, "add the missing samples of the current versions to testdata/corpus")

const corpusDir = "testdata/corpus"

// sampleTime is every sample's instant: a fixed time keeps generated
// samples identical from run to run.
var sampleTime = time.Date(2026, 11, 29, 5, 0, 0, 123456000, time.UTC)

// fill sets every field of v (a pointer) to a value that is not its zero,
// so a sample exercises every field its type had when it was written.
func fill(v reflect.Value, name string) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), name)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(sampleTime))
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), f.Name)
			}
		}
	case reflect.String:
		v.SetString(strings.ToLower(name) + "-sample")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeOf(time.Duration(0)) {
			v.SetInt(int64(1500 * time.Millisecond))
			return
		}
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), name)
		}
		if v.Type().Elem().Kind() == reflect.Uint8 && v.Len() == 16 {
			// A UUID: version 4, variant 10, as uuid.New makes them.
			v.Index(6).SetUint(0x47)
			v.Index(8).SetUint(0x87)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"sample":true}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, name+"key")
		fill(e, name)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

// filled is a filled value of e's type.
func filled[T any]() T {
	var v T
	fill(reflect.ValueOf(&v).Elem(), "")
	return v
}

// sample is one entry of the corpus: its path and the encoding today's
// writers give a filled value of the type at its current version.
type sample struct {
	path   string
	encode func() ([]byte, error)
}

func eventPath(typ string, v int) string {
	return filepath.Join(corpusDir, "events", typ, "v"+strconv.Itoa(v)+".json")
}
func formatPath(name string, v int) string {
	ext := ".bin"
	if name == tasks.LifecycleFormat {
		ext = ".json"
	}
	return filepath.Join(corpusDir, "records", name, "v"+strconv.Itoa(v)+ext)
}

// current are the samples of today's versions, written by the real
// encoders: events.New and events.Marshal (the relay's body), and each
// record format's own.
func current(t *testing.T) []sample {
	t.Helper()
	var out []sample
	for _, proto := range catalog.Events() {
		typ := reflect.TypeOf(proto)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		out = append(out, sample{eventPath(proto.EventType(), events.VersionOf(proto)), func() ([]byte, error) {
			v := reflect.New(typ)
			fill(v.Elem(), "")
			env, err := events.New(proto.EventType()+"-sample", v.Interface().(events.Event), events.Metadata{CorrelationID: "corr-sample", Actor: "actor-sample"}, sampleTime)
			if err != nil {
				return nil, err
			}
			env.ID, env.Version, env.Position = [16]byte{0: 0xc0, 6: 0x47, 8: 0x87, 15: 1}, 3, 42
			b, err := events.Marshal(env)
			if err != nil {
				return nil, err
			}
			var pretty bytes.Buffer
			err = json.Indent(&pretty, b, "", "  ")
			return append(pretty.Bytes(), '\n'), err
		}})
	}
	encoders := map[string]func() ([]byte, error){
		requestlog.BatchFormat: func() ([]byte, error) {
			return requestlog.AppendBatch(nil, []requestlog.Event{filled[requestlog.Event]()}), nil
		},
		apikey.UsesFormat: func() ([]byte, error) { return apikey.AppendUses(nil, []apikey.Use{filled[apikey.Use]()}), nil },
		tasks.LifecycleFormat: func() ([]byte, error) {
			b, err := json.Marshal(filled[tasks.Lifecycle]())
			return append(b, '\n'), err
		},
	}
	for _, f := range catalog.Formats() {
		enc, ok := encoders[f.Name]
		if !ok {
			t.Fatalf("record format %s has no encoder in this test: add one", f.Name)
		}
		out = append(out, sample{formatPath(f.Name, f.Version), enc})
	}
	return out
}

// decode reads one stored sample with today's code: an envelope is upcast
// to its type's current shape and decoded strictly (a field the type no
// longer has is a change that needed an upcaster); a record is decoded by
// its format's reader.
func decode(reg *events.Registry, types map[string]reflect.Type, path string, b []byte) error {
	rel, _ := filepath.Rel(corpusDir, path)
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) != 3 {
		return fmt.Errorf("not under events/<type>/ or records/<format>/")
	}
	version, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(parts[2], filepath.Ext(parts[2])), "v"))
	if err != nil {
		return fmt.Errorf("file name is not v<N>: %w", err)
	}
	switch parts[0] {
	case "events":
		env, err := events.Unmarshal(b)
		if err != nil {
			return err
		}
		if env.Type != parts[1] || max(env.Metadata.SchemaVersion, 1) != version {
			return fmt.Errorf("holds %s v%d", env.Type, env.Metadata.SchemaVersion)
		}
		up, err := reg.Upcast(env)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(up.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(reflect.New(types[env.Type]).Interface()); err != nil {
			return fmt.Errorf("v%d upcast to v%d does not decode strictly: %w", version, up.Metadata.SchemaVersion, err)
		}
		_, err = reg.Decode(env)
		return err
	case "records":
		var cur int
		for _, f := range catalog.Formats() {
			if f.Name == parts[1] {
				cur = f.Version
			}
		}
		if err := events.CheckFormat(parts[1], version, cur); err != nil {
			return err
		}
		switch parts[1] {
		case requestlog.BatchFormat:
			evs, err := requestlog.DecodeBatch(b, nil)
			if err == nil && (len(evs) != 1 || evs[0].RequestID == "") {
				err = fmt.Errorf("decoded %d events: %+v", len(evs), evs)
			}
			return err
		case apikey.UsesFormat:
			uses, err := apikey.DecodeUses(b, nil)
			if err == nil && len(uses) != 1 {
				err = fmt.Errorf("decoded %d uses", len(uses))
			}
			return err
		case tasks.LifecycleFormat:
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			var rec tasks.Lifecycle
			return dec.Decode(&rec)
		}
		return fmt.Errorf("no reader for record format %s", parts[1])
	}
	return fmt.Errorf("not under events/ or records/")
}

// TestCorpus decodes every sample of every version ever written with
// today's code, checks that the corpus holds every type at its current
// version, and that events.SchemaLevel names the set of types and
// versions of this build (levels.txt: one line per level).
func TestCorpus(t *testing.T) {
	reg, err := events.NewRegistry(catalog.Events()...)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]reflect.Type{}
	for _, p := range catalog.Events() {
		typ := reflect.TypeOf(p)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		types[p.EventType()] = typ
	}

	// Today's versions: present, or written with -corpus.write.
	for _, s := range current(t) {
		if _, err := os.Stat(s.path); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if !*write {
			t.Errorf("%s is missing: a type was added or got a new version; run go generate ./events/catalog", s.path)
			continue
		}
		b, err := s.encode()
		if err != nil {
			t.Fatalf("%s: %v", s.path, err)
		}
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("added %s", s.path)
	}

	// Every sample ever written decodes today.
	n := 0
	err = filepath.WalkDir(corpusDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "levels.txt" {
			return err
		}
		n++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := decode(reg, types, path, b); err != nil {
			t.Errorf("%s no longer decodes: %v (a change to a stored shape needs a new version and an upcaster)", path, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < len(catalog.Events())+len(catalog.Formats()) {
		t.Errorf("the corpus holds %d samples for %d types and formats", n, len(catalog.Events())+len(catalog.Formats()))
	}

	checkLevel(t)
}

// checkLevel: the line of events.SchemaLevel in levels.txt lists exactly
// this build's types and versions. A new type or version without a new
// level would let an older build skip a record it cannot tell concerns it.
func checkLevel(t *testing.T) {
	var set []string
	for _, p := range catalog.Events() {
		set = append(set, fmt.Sprintf("%s v%d", p.EventType(), events.VersionOf(p)))
	}
	for _, f := range catalog.Formats() {
		set = append(set, fmt.Sprintf("%s v%d", f.Name, f.Version))
	}
	slices.Sort(set)
	line := fmt.Sprintf("level %d: %s", events.SchemaLevel, strings.Join(set, ", "))
	path := filepath.Join(corpusDir, "levels.txt")
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var lines []string
	if len(b) > 0 {
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	prefix := fmt.Sprintf("level %d: ", events.SchemaLevel)
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			if l != line {
				t.Errorf("%s says %q\nbut this build is %q\na type was added or changed version: raise events.SchemaLevel and run go generate ./events/catalog", path, l, line)
			}
			return
		}
		if i == len(lines)-1 && strings.TrimPrefix(l, l[:strings.Index(l, ": ")+2]) == strings.TrimPrefix(line, prefix) {
			t.Errorf("events.SchemaLevel is %d but nothing changed since %q: a level is raised with a change, not without", events.SchemaLevel, l)
			return
		}
	}
	if !*write {
		t.Errorf("%s has no line for level %d: run go generate ./events/catalog", path, events.SchemaLevel)
		return
	}
	lines = append(lines, line)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
