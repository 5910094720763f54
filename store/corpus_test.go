package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// The corruption corpus: a store file (and, for some cases, its journal)
// damaged in each of the ways a disk, a copy or a crash damages files,
// and what the store makes of it. Each case must be detected (a typed
// error from Open, from a read, or a finding of Verify), never a panic,
// and never taken as data; a torn journal tail, which is no damage, must
// be recovered.
//
// This file uses only what every version of the store has (Open, the
// Store interface, bbolt), so that it can be run on an older one: with
// SANDFLOW_CORPUS_ISOLATE=1 each case runs in a process of its own, which
// a crash kills alone, and the test prints what happened to each.

// corpusVerify is the store's Verify where there is one: it reports
// whether the file at path verified clean.
var corpusVerify func(path string) (bool, error)

const corpusModuleSize = 20 << 10

// corpusFixture writes the undamaged store: three runs of 200 events (a
// tree with branch pages), a question, a timer, a hook and a plugin whose
// module spans overflow pages. Values are stored uncompressed so that
// the cases can find them in the file by their text.
func corpusFixture(t testing.TB, path string) {
	t.Helper()
	s, err := Open(path, &Options{NoSync: true, CompressThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		var evs []Event
		for seq := uint64(1); seq <= 200; seq++ {
			data := fmt.Sprintf(`{"input":"MARK-%s-%03d","pad":%q}`, id, seq, strings.Repeat("x", 100))
			evs = append(evs, Event{Seq: seq, Time: base.Add(time.Duration(seq) * time.Second), Kind: "step", Data: []byte(data)})
		}
		b := Batch{Events: evs}
		if id == "run-a" {
			b.PutAsks = []Ask{{ID: "ask-1", RunID: id, Tool: "t", Open: true, Request: []byte(`{"q":"QUESTION"}`), CreatedAt: base}}
			b.PutTimers = []Timer{{RunID: id, ID: "tm-1", FireAt: base.Add(time.Hour), Kind: "sleep"}}
			b.ClaimHooks = []Hook{{Token: "tok-1", RunID: id, HookID: 1}}
		}
		r := Run{ID: id, Tool: "t", Plugin: "p", Version: 1, ModuleHash: "h1", Status: StatusWaiting, CreatedAt: base, UpdatedAt: base,
			LastSeq: 200, Detail: []byte(fmt.Sprintf(`{"result":"RESULT-%s"}`, id))}
		if err := s.CreateRun(ctx, r, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutPlugin(ctx, Plugin{Name: "p", ModuleHash: "h1", Manifest: []byte(`{}`), CreatedAt: base}, corpusModule()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func corpusModule() []byte {
	m := make([]byte, corpusModuleSize)
	rand.New(rand.NewSource(7)).Read(m)
	copy(m, "MODULE-START")
	return m
}

// corpusContents reads everything the fixture stored through the Store
// interface, as one string, or the first error.
func corpusContents(s Store) (string, error) {
	ctx := context.Background()
	var b strings.Builder
	runs, err := s.Runs(ctx, RunFilter{})
	if err != nil {
		return "", err
	}
	for _, r := range runs {
		fmt.Fprintf(&b, "run %s %s %d %s\n", r.ID, r.Status, r.LastSeq, r.Detail)
		evs, err := s.Events(ctx, r.ID, 0, 0)
		if err != nil {
			return "", err
		}
		for _, e := range evs {
			fmt.Fprintf(&b, " %d %s %s %s\n", e.Seq, e.Time.Format(time.RFC3339Nano), e.Kind, e.Data)
		}
	}
	asks, err := s.Asks(ctx, false)
	if err != nil {
		return "", err
	}
	for _, a := range asks {
		fmt.Fprintf(&b, "ask %s %s %v %s\n", a.ID, a.RunID, a.Open, a.Request)
	}
	timers, err := s.DueTimers(ctx, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	if err != nil {
		return "", err
	}
	for _, tm := range timers {
		fmt.Fprintf(&b, "timer %s %s %s\n", tm.ID, tm.RunID, tm.FireAt)
	}
	for _, tok := range []string{"tok-1"} {
		h, err := s.Hook(ctx, tok)
		if err != nil && !errors.Is(err, ErrHookNotFound) {
			return "", err
		}
		fmt.Fprintf(&b, "hook %s %s\n", h.Token, h.RunID)
	}
	ps, err := s.Plugins(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		m, err := s.Module(ctx, p.ModuleHash)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "plugin %s %d %s %x\n", p.Name, p.Version, p.ModuleHash, m)
	}
	return b.String(), nil
}

// Outcomes of a case.
const (
	outDetected  = "detected"          // a typed error (ErrCorrupt, ErrNotStore) or a Verify finding
	outRecovered = "recovered"         // opened, read and verified clean (a torn tail's right outcome)
	outUntyped   = "refused untyped"   // an error that does not say the file is damaged
	outSilent    = "accepted silently" // opened and read without a word, the data not what was stored
	outCrashed   = "crashed"           // a panic or a fault
)

func damageErr(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotStore) || errors.Is(err, ErrOldFormat)
}

// corpusProbe opens the damaged store at path, reads all of it and
// verifies it, and says what came of it.
func corpusProbe(path, want string) (outcome, detail string) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			outcome, detail = outCrashed, fmt.Sprint(r)
		}
	}()
	s, err := Open(path, &Options{NoSync: true, LockTimeout: time.Second})
	if err != nil {
		if damageErr(err) {
			return outDetected, "open: " + err.Error()
		}
		return outUntyped, "open: " + err.Error()
	}
	got, err := corpusContents(s)
	s.Close()
	if err != nil {
		if damageErr(err) {
			return outDetected, "read: " + err.Error()
		}
		return outUntyped, "read: " + err.Error()
	}
	if corpusVerify != nil {
		ok, err := corpusVerify(path)
		if err != nil {
			return outUntyped, "verify: " + err.Error()
		}
		if !ok {
			return outDetected, "verify found damage"
		}
	}
	if want != "" && got != want {
		return outSilent, "the store read back other data than was stored"
	}
	if want == "" {
		return outRecovered, ""
	}
	return outRecovered, "read back as stored"
}

// corpusFiles are the bytes of a case's files.
type corpusFiles struct {
	db, journal []byte // journal nil: none
	pageSize    int
	pages       map[string][]int // page ids by type ("branch", "leaf", "overflow")
}

type corpusCase struct {
	name string
	// journal: the case starts from the fixture with a journal of
	// records not yet checkpointed.
	journal bool
	damage  func(t testing.TB, f *corpusFiles)
	// torn: the damage is a torn last journal write, which must be
	// recovered rather than reported.
	torn bool
}

func flip(t testing.TB, b []byte, off int, mask byte) {
	t.Helper()
	if off < 0 || off >= len(b) {
		t.Fatalf("offset %d outside %d bytes", off, len(b))
	}
	b[off] ^= mask
}

func find(t testing.TB, b []byte, s string) int {
	t.Helper()
	i := bytes.Index(b, []byte(s))
	if i < 0 {
		t.Fatalf("%q not in the file", s)
	}
	return i
}

// rawUpdate changes the case's db bytes through bbolt, as a program
// writing into the file without the store would.
func rawUpdate(t testing.TB, f *corpusFiles, fn func(tx *bolt.Tx) error) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "raw.db")
	if err := os.WriteFile(p, f.db, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if f.db, err = os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
}

func swapValues(bucket []byte, k1, k2 []byte) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		v1, v2 := bytes.Clone(b.Get(k1)), bytes.Clone(b.Get(k2))
		if v1 == nil || v2 == nil {
			return fmt.Errorf("swap: %q or %q missing", k1, k2)
		}
		if err := b.Put(k1, v2); err != nil {
			return err
		}
		return b.Put(k2, v1)
	}
}

func pageOf(t testing.TB, f *corpusFiles, typ string) int {
	t.Helper()
	ids := f.pages[typ]
	if len(ids) == 0 {
		t.Fatalf("the fixture has no %s page", typ)
	}
	return ids[len(ids)/2]
}

var corpusCases = []corpusCase{
	{name: "0-byte file", damage: func(t testing.TB, f *corpusFiles) { f.db = nil }},
	{name: "foreign file (text)", damage: func(t testing.TB, f *corpusFiles) {
		f.db = bytes.Repeat([]byte("this is not a database\n"), 1000)
	}},
	{name: "foreign file (SQLite header)", damage: func(t testing.TB, f *corpusFiles) {
		f.db = append([]byte("SQLite format 3\x00"), make([]byte, 8192)...)
	}},
	{name: "truncated to the meta pages", damage: func(t testing.TB, f *corpusFiles) { f.db = f.db[:2*f.pageSize] }},
	{name: "truncated to a third", damage: func(t testing.TB, f *corpusFiles) { f.db = f.db[:len(f.db)/3] }},
	{name: "truncated in half", damage: func(t testing.TB, f *corpusFiles) { f.db = f.db[:len(f.db)/2] }},
	{name: "truncated mid-page", damage: func(t testing.TB, f *corpusFiles) {
		f.db = f.db[:(pageOf(t, f, "leaf")*f.pageSize)+f.pageSize/2]
	}},
	{name: "meta page 0 bit flipped", damage: func(t testing.TB, f *corpusFiles) { flip(t, f.db, 16+40, 0x04) }},
	{name: "meta page 1 bit flipped", damage: func(t testing.TB, f *corpusFiles) { flip(t, f.db, f.pageSize+16+40, 0x04) }},
	{name: "both meta pages bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, 16+8, 0x01)
		flip(t, f.db, f.pageSize+16+8, 0x01)
	}},
	{name: "meta root page id changed (checksum fixed)", damage: func(t testing.TB, f *corpusFiles) {
		// A meta page that checks out, naming a wrong root: what a
		// program writing a bad meta with a good checksum leaves.
		for _, m := range []int{0, f.pageSize} {
			binary.LittleEndian.PutUint64(f.db[m+32:], uint64(pageOf(t, f, "leaf")))
			refreshMetaSum(f.db[m:])
		}
	}},
	{name: "branch page child id bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "branch")*f.pageSize+16+8, 0x01)
	}},
	{name: "branch page key bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		p := pageOf(t, f, "branch") * f.pageSize
		e := p + 16 + 16*int(binary.LittleEndian.Uint16(f.db[p+10:])-1) // the last element
		pos := int(binary.LittleEndian.Uint32(f.db[e:]))
		flip(t, f.db, e+pos+2, 0x01)
	}},
	{name: "leaf page type flipped", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "leaf")*f.pageSize+8, 0x03)
	}},
	{name: "leaf page count raised", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "leaf")*f.pageSize+11, 0x40)
	}},
	{name: "leaf page element offset bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "leaf")*f.pageSize+16+4+2, 0x10)
	}},
	{name: "page overflow count raised", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "leaf")*f.pageSize+12+2, 0x01)
	}},
	{name: "page id in header changed", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, pageOf(t, f, "leaf")*f.pageSize, 0x01)
	}},
	{name: "event input byte changed", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, find(t, f.db, "MARK-run-b-100")+len("MARK-run-b-1"), 0x01) // 100 -> 110
	}},
	{name: "run result byte changed", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, find(t, f.db, "RESULT-run-c")+len("RESULT-run-"), 0x01) // c -> b
	}},
	{name: "question request byte changed", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, find(t, f.db, "QUESTION"), 0x20)
	}},
	{name: "module byte changed (overflow page)", damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.db, find(t, f.db, "MODULE-START")+corpusModuleSize/2, 0x80)
	}},
	{name: "event key seq bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		k := eventKey("run-b", 77)
		flip(t, f.db, find(t, f.db, string(k))+len(k)-1, 0x02) // 77 -> 79
	}},
	{name: "event key run id bit flipped", damage: func(t testing.TB, f *corpusFiles) {
		k := eventKey("run-c", 150)
		flip(t, f.db, find(t, f.db, string(k))+4, 0x01) // run-c -> run-b
	}},
	{name: "run records swapped", damage: func(t testing.TB, f *corpusFiles) {
		rawUpdate(t, f, swapValues(bucketRuns, []byte("run-a"), []byte("run-b")))
	}},
	{name: "events swapped", damage: func(t testing.TB, f *corpusFiles) {
		rawUpdate(t, f, swapValues(bucketEvents, eventKey("run-a", 5), eventKey("run-a", 6)))
	}},
	{name: "event copied over another", damage: func(t testing.TB, f *corpusFiles) {
		rawUpdate(t, f, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketEvents)
			return b.Put(eventKey("run-c", 2), bytes.Clone(b.Get(eventKey("run-c", 1))))
		})
	}},
	{name: "value moved to another bucket", damage: func(t testing.TB, f *corpusFiles) {
		rawUpdate(t, f, func(tx *bolt.Tx) error {
			v := bytes.Clone(tx.Bucket(bucketRuns).Get([]byte("run-a")))
			return tx.Bucket(bucketSessions).Put([]byte("run-a"), v)
		})
	}},
	{name: "event deleted (gap in a log)", damage: func(t testing.TB, f *corpusFiles) {
		rawUpdate(t, f, func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Delete(eventKey("run-b", 50)) })
	}},
	{name: "journal record 1 bit flipped", journal: true, damage: func(t testing.TB, f *corpusFiles) {
		flip(t, f.journal, journal.Header+3, 0x01)
	}},
	{name: "journal record 3 length changed", journal: true, damage: func(t testing.TB, f *corpusFiles) {
		off := 0
		for i := 0; i < 2; i++ {
			off += journal.Header + int(binary.BigEndian.Uint32(f.journal[off:]))
		}
		flip(t, f.journal, off+3, 0x08)
	}},
	{name: "journal mid-record cut (records after it kept)", journal: true, damage: func(t testing.TB, f *corpusFiles) {
		// Record 2's middle removed: its length now runs into record 3.
		r1 := journal.Header + int(binary.BigEndian.Uint32(f.journal))
		r2 := journal.Header + int(binary.BigEndian.Uint32(f.journal[r1:]))
		f.journal = append(f.journal[:r1+r2/2:r1+r2/2], f.journal[r1+r2:]...)
	}},
	{name: "journal torn tail (last record cut short)", journal: true, torn: true, damage: func(t testing.TB, f *corpusFiles) {
		end := journalEnd(f.journal)
		f.journal = f.journal[:end-7]
	}},
	{name: "journal torn tail (last record's header only)", journal: true, torn: true, damage: func(t testing.TB, f *corpusFiles) {
		end, last := journalEnd(f.journal), 0
		for off := 0; off < end; off += journal.Header + int(binary.BigEndian.Uint32(f.journal[off:])) {
			last = off
		}
		f.journal = f.journal[:last+journal.Header]
	}},
}

// journalEnd is where the journal's records end (a mapped journal goes on
// with zeros).
func journalEnd(j []byte) int {
	off := 0
	for off+journal.Header <= len(j) {
		n := int(binary.BigEndian.Uint32(j[off:]))
		if n == 0 || off+journal.Header+n > len(j) {
			break
		}
		off += journal.Header + n
	}
	return off
}

// refreshMetaSum recomputes a meta page's FNV-64a checksum, as bbolt
// does.
func refreshMetaSum(p []byte) {
	h := uint64(14695981039346656037)
	for _, c := range p[16:72] {
		h ^= uint64(c)
		h *= 1099511628211
	}
	binary.LittleEndian.PutUint64(p[72:], h)
}

// corpusBase writes the fixture, and one with a journal (the fixture
// opened again and six batches appended, copied as a crash leaves it),
// and returns their bytes with the reachable pages by type.
func corpusBase(t *testing.T, dir string) (plain, withJournal *corpusFiles, want, wantJournal string) {
	t.Helper()
	path := filepath.Join(dir, "fixture.db")
	corpusFixture(t, path)
	db, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	plain = &corpusFiles{db: db, pages: map[string][]int{}}
	s, err := Open(path, &Options{NoSync: true, CompressThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	if want, err = corpusContents(s); err != nil {
		t.Fatal(err)
	}
	s.delay = time.Hour
	appendCrashBatches(t, s, 1, 6)
	jdb, jpath := crashCopy(t, s, t.TempDir())
	if wantJournal, err = corpusContents(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	withJournal = &corpusFiles{pages: map[string][]int{}}
	if withJournal.db, err = os.ReadFile(jdb); err != nil {
		t.Fatal(err)
	}
	if withJournal.journal, err = os.ReadFile(jpath); err != nil {
		t.Fatal(err)
	}
	// The reachable pages of the plain fixture, by type, as bbolt reports
	// them (from a copy: the fixture itself has been written since).
	cp := filepath.Join(t.TempDir(), "pages.db")
	if err := os.WriteFile(cp, plain.db, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	plain.pageSize = bdb.Info().PageSize
	withJournal.pageSize = plain.pageSize
	err = bdb.View(func(tx *bolt.Tx) error {
		for id := 2; int64(id) < tx.Size()/int64(plain.pageSize); id++ {
			pi, err := tx.Page(id)
			if err != nil || pi == nil {
				continue
			}
			switch {
			case pi.Type == "branch" || pi.Type == "leaf":
				plain.pages[pi.Type] = append(plain.pages[pi.Type], id)
				if pi.OverflowCount > 0 {
					plain.pages["overflow"] = append(plain.pages["overflow"], id)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return plain, withJournal, want, wantJournal
}

// TestCorruptionCorpus damages the fixture in each corpus case and
// probes the result. Each case must be detected (a torn tail recovered),
// with no crash; the tally is printed.
func TestCorruptionCorpus(t *testing.T) {
	if name := os.Getenv("SANDFLOW_CORPUS_CASE"); name != "" {
		corpusChild(t, name)
		return
	}
	isolate := os.Getenv("SANDFLOW_CORPUS_ISOLATE") == "1"
	plain, withJournal, want, wantJournal := corpusBase(t, t.TempDir())
	tally := map[string]int{}
	for _, c := range corpusCases {
		base, w := plain, want
		if c.journal {
			base, w = withJournal, wantJournal
		}
		if c.torn {
			w = "" // fewer records than were written: checked by Verify and the read
		}
		var outcome, detail string
		if isolate {
			outcome, detail = corpusInChild(t, c.name)
		} else {
			dir := t.TempDir()
			path := corpusWrite(t, dir, base, c)
			outcome, detail = corpusProbe(path, w)
		}
		if c.torn {
			tally["torn "+outcome]++
		} else {
			tally[outcome]++
		}
		t.Logf("%-50s %-17s %s", c.name, outcome, firstLineOf(detail))
		if isolate {
			continue // reporting on another build: no assertions
		}
		if c.torn {
			if outcome != outRecovered {
				t.Errorf("%s: %s (%s), want it recovered", c.name, outcome, detail)
			}
		} else if outcome != outDetected {
			t.Errorf("%s: %s (%s), want it detected", c.name, outcome, detail)
		}
	}
	damaged := len(corpusCases) - countTorn()
	t.Logf("corpus: %d of %d damaged files detected, %d crashed, %d accepted silently, %d refused untyped; %d of %d torn tails recovered",
		tally[outDetected], damaged, tally[outCrashed], tally[outSilent], tally[outUntyped], tally["torn "+outRecovered], countTorn())
}

func countTorn() int {
	n := 0
	for _, c := range corpusCases {
		if c.torn {
			n++
		}
	}
	return n
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// corpusWrite writes a case's damaged files into dir.
func corpusWrite(t testing.TB, dir string, base *corpusFiles, c corpusCase) string {
	t.Helper()
	f := &corpusFiles{db: bytes.Clone(base.db), journal: bytes.Clone(base.journal), pageSize: base.pageSize, pages: base.pages}
	c.damage(t, f)
	path := filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(path, f.db, 0o600); err != nil {
		t.Fatal(err)
	}
	if f.journal != nil {
		if err := os.WriteFile(path+JournalSuffix, f.journal, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// corpusInChild runs one case in a process of its own.
func corpusInChild(t *testing.T, name string) (string, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCorruptionCorpus$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDFLOW_CORPUS_CASE="+name, "SANDFLOW_CORPUS_ISOLATE=")
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if _, rest, ok := strings.Cut(line, "CORPUS-RESULT "); ok {
			var r struct{ Outcome, Detail string }
			if json.Unmarshal([]byte(rest), &r) == nil {
				return r.Outcome, r.Detail
			}
		}
	}
	return outCrashed, "the process died: " + lastLines(string(out), 3)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "unexpected fault") || strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "SIG") {
			return l
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func corpusChild(t *testing.T, name string) {
	plain, withJournal, want, wantJournal := corpusBase(t, t.TempDir())
	for _, c := range corpusCases {
		if c.name != name {
			continue
		}
		base, w := plain, want
		if c.journal {
			base, w = withJournal, wantJournal
		}
		if c.torn {
			w = ""
		}
		path := corpusWrite(t, t.TempDir(), base, c)
		outcome, detail := corpusProbe(path, w)
		b, _ := json.Marshal(struct{ Outcome, Detail string }{outcome, detail})
		fmt.Printf("CORPUS-RESULT %s\n", b)
		return
	}
	t.Fatalf("no corpus case %q", name)
}
