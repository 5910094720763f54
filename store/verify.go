package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// Finding is one thing Verify found wrong.
type Finding struct {
	// Bucket is where: a bucket's name, "file" for the database file's
	// structure, or "journal".
	Bucket string `json:"bucket"`
	// Key is the value's key, printed (quoted, or hex), when there is one.
	Key string `json:"key,omitempty"`
	// Offset is the byte offset in the file or journal, or -1.
	Offset int64 `json:"offset"`
	// What says what is wrong.
	What string `json:"what"`
}

func (f Finding) String() string {
	s := f.Bucket
	if f.Key != "" {
		s += " " + f.Key
	}
	if f.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", f.Offset)
	}
	return s + ": " + f.What
}

// Report is what Verify checked and found.
type Report struct {
	Path string `json:"path"`
	// Pages is how many pages of the file were reached and checked.
	Pages uint64 `json:"pages"`
	// Values counts the values whose checksums were checked, by bucket.
	Values map[string]int `json:"values"`
	Runs   int            `json:"runs"`
	Events int            `json:"events"`
	// JournalRecords counts the journal's records not yet in the main
	// file: writes of a process that stopped without closing the store,
	// which the next read-write open applies. They are not damage.
	JournalRecords int `json:"journalRecords"`
	// Findings lists the damage found, at most MaxFindings of it;
	// Omitted counts what was left out.
	Findings []Finding `json:"findings"`
	Omitted  int       `json:"omitted,omitempty"`
}

// OK reports whether nothing was found wrong.
func (r *Report) OK() bool { return len(r.Findings) == 0 && r.Omitted == 0 }

// MaxFindings bounds a Report's findings.
const MaxFindings = 1000

func (r *Report) add(f Finding) {
	if len(r.Findings) >= MaxFindings {
		r.Omitted++
		return
	}
	r.Findings = append(r.Findings, f)
}

func (r *Report) addErr(err error) {
	var ce *CorruptError
	var ne *NotStoreError
	var oe *OldFormatError
	switch {
	case errors.As(err, &ce):
		key := ""
		if ce.Key != nil {
			key = integrity.PrintKey(ce.Key)
		}
		r.add(Finding{Bucket: ce.Bucket, Key: key, Offset: ce.Offset, What: ce.What})
	case errors.As(err, &ne):
		r.add(Finding{Bucket: "file", Offset: -1, What: ne.Reason})
	case errors.As(err, &oe):
		r.add(Finding{Bucket: "file", Offset: -1, What: oe.Error()})
	default:
		r.add(Finding{Bucket: "file", Offset: -1, What: err.Error()})
	}
}

func (r *Report) bad(bucket, key []byte, format string, args ...any) {
	k := ""
	if key != nil {
		k = integrity.PrintKey(key)
	}
	r.add(Finding{Bucket: string(bucket), Key: k, Offset: -1, What: fmt.Sprintf(format, args...)})
}

// Verify checks the store file at path, which it opens read-only and
// never writes (another process may not have it open to write: that is
// ErrLocked). It checks the file's structure, every value's checksum,
// that every value decodes and is stored under the key its content
// gives, that every run's log is dense (events 1..LastSeq, no gaps, no
// extras), that every index entry (timer, question, snapshot, state
// image, plugin version) names a run or module that exists, that
// content-addressed module bytes match their hash, and that the journal
// is damaged nowhere but in a torn last record. It repairs nothing.
//
// Damage is reported in the Report's findings, not as an error; the
// error is for what kept Verify from looking (a missing file, a lock).
func Verify(path string) (*Report, error) {
	rep := &Report{Path: path, Values: map[string]int{}}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: verify: %w", err)
	}
	s, err := Open(path, &Options{ReadOnly: true, verify: true})
	if err != nil {
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotStore) || errors.Is(err, ErrOldFormat) {
			rep.addErr(err)
			return rep, nil
		}
		return nil, err
	}
	defer s.Close()
	rep.Pages = s.pages
	err = integrity.Guard("verify", nil, func() error { return s.db.View(func(tx *bolt.Tx) error { return verifyTx(tx, rep) }) })
	if err != nil {
		rep.addErr(err)
	}
	last, err := s.checkpointSeq()
	if err != nil {
		rep.addErr(err)
		return rep, nil
	}
	data, err := os.ReadFile(path + JournalSuffix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: verify: read journal: %w", err)
	}
	redo, err := journal.Scan(data, last)
	if err != nil {
		rep.addErr(err)
	}
	rep.JournalRecords = len(redo)
	for _, r := range redo {
		if err := checkRecord(r[journal.Header:]); err != nil {
			rep.add(Finding{Bucket: "journal", Offset: -1, What: fmt.Sprintf("record %d: %v", journal.Seq(r), err)})
		}
	}
	return rep, nil
}

// checkRecord checks a journal record's operations and the checksums of
// the values it puts.
func checkRecord(body []byte) error {
	for len(body) > 0 {
		if len(body) < 2 || (body[0] != journal.OpPut && body[0] != journal.OpDelete) || int(body[1]) >= len(bucketNames) {
			return errors.New("bad operation")
		}
		op, name := body[0], bucketNames[body[1]]
		k, rest, ok := journal.Cut(body[2:])
		if !ok || len(k) == 0 {
			return errors.New("bad key")
		}
		body = rest
		if op == journal.OpDelete {
			continue
		}
		v, rest, ok := journal.Cut(body)
		if !ok {
			return errors.New("bad value")
		}
		body = rest
		if _, err := integrity.Open(name, k, v); err != nil {
			return err
		}
	}
	return nil
}

// runFacts is what a verifier keeps of a run to check the indexes.
type runFacts struct {
	last     uint64
	terminal bool
	seen     uint64 // the last event seq met
}

// verifier checks a store's buckets in one read transaction, in an
// order where what a bucket's check needs (the runs, the modules) is
// read before it.
type verifier struct {
	tx      *bolt.Tx
	rep     *Report
	runs    map[string]*runFacts
	modules map[string]bool
}

func verifyTx(tx *bolt.Tx, rep *Report) error {
	v := &verifier{tx: tx, rep: rep, runs: map[string]*runFacts{}, modules: map[string]bool{}}
	v.open(bMeta, nil)
	v.open(bRuns, v.run)
	v.open(bEvents, v.event)
	v.logs()
	v.open(bTimers, v.timer)
	v.open(bAsks, v.ask)
	v.open(bHooks, v.hook)
	v.open(bModules, v.module)
	v.open(bPlugins, v.plugin)
	v.open(bSessions, func(k, val []byte) {
		if _, err := unpackValue(val); err != nil {
			rep.bad(bucketSessions, k, "%v", err)
		}
	})
	v.open(bSnapshots, func(k, val []byte) { v.image(bucketSnapshots, k, val) })
	v.open(bStates, func(k, val []byte) { v.image(bucketStates, k, val) })
	return nil
}

// open checks every value's checksum in a bucket and hands the values
// that pass to fn: the checks of content read only those.
func (v *verifier) open(id bucketID, fn func(k, v []byte)) {
	name := bucketNames[id]
	b := v.tx.Bucket(name)
	if b == nil {
		v.rep.bad(name, nil, "bucket missing")
		return
	}
	_ = b.ForEach(func(k, sv []byte) error {
		v.rep.Values[string(name)]++
		val, err := integrity.Open(name, k, sv)
		if err != nil {
			v.rep.addErr(err)
			return nil
		}
		if fn != nil {
			fn(k, val)
		}
		return nil
	})
}

func (v *verifier) run(k, val []byte) {
	var r Run
	if err := decodeRun(val, &r); err != nil {
		v.rep.bad(bucketRuns, k, "run record does not decode: %v", err)
		return
	}
	if r.ID != string(k) {
		v.rep.bad(bucketRuns, k, "run record of run %q", r.ID)
	}
	if err := ValidRunID(string(k)); err != nil {
		v.rep.bad(bucketRuns, k, "not a valid run id")
	}
	v.runs[string(k)] = &runFacts{last: r.LastSeq, terminal: r.Status.Terminal()}
	v.rep.Runs++
}

func (v *verifier) event(k, val []byte) {
	if len(k) >= 10 && k[len(k)-9] == 0 {
		if _, err := decodeEvent(binary.BigEndian.Uint64(k[len(k)-8:]), val); err != nil {
			v.rep.bad(bucketEvents, k, "%v", err)
		}
	}
}

// logs checks the logs' shape, from the keys alone (a damaged value is
// reported by open, and is no gap): dense from event 1 to the run
// record's last.
func (v *verifier) logs() {
	rep := v.rep
	if b := v.tx.Bucket(bucketEvents); b != nil {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			rep.Events++
			if len(k) < 10 || k[len(k)-9] != 0 {
				rep.bad(bucketEvents, k, "not an event key (run id, 0, seq)")
				continue
			}
			id, seq := string(k[:len(k)-9]), binary.BigEndian.Uint64(k[len(k)-8:])
			r := v.runs[id]
			if r == nil {
				rep.bad(bucketEvents, k, "event of run %q, which has no record", id)
				continue
			}
			if seq != r.seen+1 {
				rep.bad(bucketEvents, k, "run %s: event %d follows event %d (a gap in the log)", id, seq, r.seen)
			}
			if seq > r.last {
				rep.bad(bucketEvents, k, "run %s: event %d is past the record's last event %d", id, seq, r.last)
			}
			r.seen = seq
		}
	}
	for id, r := range v.runs {
		if r.seen < r.last {
			rep.bad(bucketRuns, []byte(id), "the record says the log ends at event %d, the log ends at %d", r.last, r.seen)
		}
	}
}

// runOf is the run an index entry names, reported when it has no record.
func (v *verifier) runOf(bucket, k []byte, id, what string) *runFacts {
	r := v.runs[id]
	if r == nil {
		v.rep.bad(bucket, k, "%s of run %q, which has no record", what, id)
	}
	return r
}

func (v *verifier) timer(k, val []byte) {
	var t Timer
	if err := json.Unmarshal(val, &t); err != nil {
		v.rep.bad(bucketTimers, k, "timer does not decode: %v", err)
		return
	}
	if !bytes.Equal(timerKey(t), k) {
		v.rep.bad(bucketTimers, k, "timer %s of run %s is stored under another timer's key", t.ID, t.RunID)
	}
	v.runOf(bucketTimers, k, t.RunID, "timer")
}

func (v *verifier) ask(k, val []byte) {
	var a Ask
	if err := decodeAsk(val, &a); err != nil {
		v.rep.bad(bucketAsks, k, "question record does not decode: %v", err)
		return
	}
	if a.ID != string(k) {
		v.rep.bad(bucketAsks, k, "record of question %q", a.ID)
	}
	v.runOf(bucketAsks, k, a.RunID, "question")
}

func (v *verifier) hook(k, val []byte) {
	var h Hook
	if err := json.Unmarshal(val, &h); err != nil {
		v.rep.bad(bucketHooks, k, "hook does not decode: %v", err)
		return
	}
	// Not checked against the runs: ClaimHook may give a token to a run
	// before its record exists.
	if h.Token != string(k) || h.RunID == "" {
		v.rep.bad(bucketHooks, k, "holder of token %q is run %q", h.Token, h.RunID)
	}
}

func (v *verifier) module(k, val []byte) {
	data, err := unpackValue(val)
	if err != nil {
		v.rep.bad(bucketModules, k, "%v", err)
		return
	}
	v.modules[string(k)] = true
	if want, err := hex.DecodeString(string(k)); err == nil && len(want) == sha256.Size {
		if got := sha256.Sum256(data); !bytes.Equal(got[:], want) {
			v.rep.bad(bucketModules, k, "module bytes hash to %x", got)
		}
	}
}

func (v *verifier) plugin(k, val []byte) {
	var p Plugin
	if err := json.Unmarshal(val, &p); err != nil {
		v.rep.bad(bucketPlugins, k, "plugin record does not decode: %v", err)
		return
	}
	if p.Version < 1 || !bytes.Equal(pluginKey(p.Name, p.Version), k) {
		v.rep.bad(bucketPlugins, k, "record of plugin %s version %d", p.Name, p.Version)
	}
	if !v.modules[p.ModuleHash] {
		v.rep.bad(bucketPlugins, k, "its module %s is missing", p.ModuleHash)
	}
}

// image checks a snapshot or a state image: a seq within its run's log,
// of a run that has not ended.
func (v *verifier) image(name, k, val []byte) {
	if len(val) < 8 {
		v.rep.bad(name, k, "%d bytes, shorter than its seq", len(val))
		return
	}
	r := v.runOf(name, k, string(k), "image")
	if r == nil {
		return
	}
	if seq := binary.BigEndian.Uint64(val); seq > r.last {
		v.rep.bad(name, k, "taken at event %d, past the log's last %d", seq, r.last)
	}
	if r.terminal {
		v.rep.bad(name, k, "kept for a run that has ended")
	}
}
