package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/store"
)

// schemaFields reads abi/HISTORY.md's table of fields for every kind.
func schemaFields(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "abi", "HISTORY.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start, end := strings.Index(doc, "## Event kinds"), strings.Index(doc, "## Nested objects")
	if start < 0 || end < start {
		t.Fatal("HISTORY.md has no event kinds section")
	}
	heading := regexp.MustCompile("(?m)^### `(\\w+)`\n")
	row := regexp.MustCompile("(?m)^\\| `(\\w+)` \\|")
	out := map[string][]string{}
	body := doc[start:end]
	locs := heading.FindAllStringSubmatchIndex(body, -1)
	for i, l := range locs {
		next := len(body)
		if i+1 < len(locs) {
			next = locs[i+1][0]
		}
		kind := body[l[2]:l[3]]
		for _, m := range row.FindAllStringSubmatch(body[l[1]:next], -1) {
			out[kind] = append(out[kind], m[1])
		}
	}
	return out
}

// TestKindTypesMatchTheSchema: every kind has a type, whose fields are
// the ones the schema document lists for it, each Data's field of that
// JSON name (same Go name, type and tag), in Data's order.
func TestKindTypesMatchTheSchema(t *testing.T) {
	schema := schemaFields(t)
	data := reflect.TypeFor[Data]()
	byJSON := map[string]int{}
	for i := range data.NumField() {
		name, _, _ := strings.Cut(data.Field(i).Tag.Get("json"), ",")
		byJSON[name] = i
	}
	if len(schema) != len(evKinds) {
		t.Errorf("the schema has %d kinds, the package %d", len(schema), len(evKinds))
	}
	for _, kind := range evKinds {
		p, ok := new(Data).typed(kind)
		if !ok {
			t.Errorf("%s has no type", kind)
			continue
		}
		if p.EventKind() != kind {
			t.Errorf("%s's type says it is %s", kind, p.EventKind())
		}
		typ := reflect.TypeOf(p).Elem()
		var names []string
		last := -1
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			names = append(names, name)
			di, ok := byJSON[name]
			if !ok {
				t.Errorf("%s.%s (%q) is no field of Data", typ.Name(), f.Name, name)
				continue
			}
			if df := data.Field(di); df.Name != f.Name || df.Type != f.Type || df.Tag != f.Tag {
				t.Errorf("%s.%s is %s %s `%s`, Data's %s %s `%s`", typ.Name(), f.Name, f.Name, f.Type, f.Tag, df.Name, df.Type, df.Tag)
			}
			if di < last {
				t.Errorf("%s.%s is out of Data's order", typ.Name(), f.Name)
			}
			last = di
		}
		want := slices.Clone(schema[kind])
		slices.Sort(want)
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("%s's type has fields %v, the schema %v", kind, names, want)
		}
	}
}

// TestParseKeepsEveryField: the typed value of every event of the golden
// histories, which the host wrote, marshals to the bytes its Data does, so
// nothing the host writes on a kind is lost in the kind's type.
func TestParseKeepsEveryField(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "histories", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden histories: %v", err)
	}
	kinds := map[string]bool{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := Read(f)
		f.Close()
		if err != nil {
			continue // the histories that are bad on purpose
		}
		for _, he := range hist.Events {
			e := store.Event{Seq: he.Seq, Time: he.Time, Kind: he.Kind, Data: he.Data}
			p, err := Parse(e)
			if err != nil {
				t.Fatalf("%s: event %d: %v", filepath.Base(name), e.Seq, err)
			}
			got, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: event %d (%s): typed %s, Data %s", filepath.Base(name), e.Seq, e.Kind, got, want)
			}
			kinds[e.Kind] = true
		}
	}
	if len(kinds) < 10 {
		t.Fatalf("the golden histories hold only %d kinds", len(kinds))
	}
}

func TestParseRefusesWhatItCannotRead(t *testing.T) {
	if _, err := Parse(store.Event{Seq: 3, Kind: "no_such_kind", Data: []byte(`{}`)}); !errors.Is(err, ErrBadHistory) {
		t.Errorf("an unknown kind: %v", err)
	}
	if _, err := Parse(store.Event{Seq: 4, Kind: KindStepStarted, Data: []byte(`{"op":"two"}`)}); !errors.Is(err, ErrBadHistory) {
		t.Errorf("data that does not decode: %v", err)
	}
	p, err := Parse(store.Event{Seq: 5, Kind: KindStepStarted, Data: []byte(`{"op":2,"name":"plan","attempt":1}`)})
	if s, ok := p.(*StepStarted); err != nil || !ok || s.Op != 2 || s.Name != "plan" || s.Attempt != 1 {
		t.Errorf("a step_started: %#v, %v", p, err)
	}
}
