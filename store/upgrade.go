package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sandflow/sandflow/store/internal/filelock"
	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// Upgrade converts a store of format 1, 2 or 3 (values without
// checksums) at path to this build's format, in place and in one bbolt
// transaction: a crash leaves the old file as it was. It first applies
// the old journal's records after the last checkpoint, as the old build
// would have; then it checks that every value decodes as its bucket's
// values must, and seals each with its checksum. A value that does not
// decode stops it with a *CorruptError, and the file is left unchanged:
// checksums are only ever put on values that were read back whole. It
// returns how many values it sealed. A store already in this format is
// left alone (0, nil).
//
// The transaction holds the whole file's pages in memory until it
// commits.
func Upgrade(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("store: upgrade: %w", err)
	}
	if err := filelock.Lock(f, true, time.Second); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return 0, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return 0, err
	}
	if _, err := checkExisting(f, path); err != nil {
		f.Close()
		return 0, err
	}
	var db *bolt.DB
	err = integrity.Guard("open", nil, func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true,
			OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil }})
		return err
	})
	if err != nil {
		f.Close()
		return 0, err
	}
	defer db.Close()
	var n int
	err = integrity.Guard("upgrade", nil, func() error {
		return db.Update(func(tx *bolt.Tx) error {
			var err error
			n, err = upgradeTx(tx, path)
			return err
		})
	})
	if errors.Is(err, errCurrentFormat) {
		return 0, nil
	}
	if err == nil {
		err = db.Sync()
	}
	if err != nil {
		return 0, err
	}
	// The journal's records are in the main file now.
	if err := os.Remove(path + JournalSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return n, fmt.Errorf("store: upgrade: remove journal: %w", err)
	}
	return n, nil
}

// upgradeTx is Upgrade's transaction: the old journal applied, every
// bucket's values sealed, then the checkpoint and the format version. It
// returns errCurrentFormat, which rolls it back, for a store in this
// build's format.
func upgradeTx(tx *bolt.Tx, path string) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, &NotStoreError{Path: path, Reason: "no meta bucket"}
	}
	raw := meta.Get(metaSchema)
	if len(raw) != 4 || binary.BigEndian.Uint32(raw) < 1 || binary.BigEndian.Uint32(raw) >= schemaVersion {
		if _, err := integrity.Open(bucketMeta, metaSchema, raw); err == nil && raw != nil {
			return 0, errCurrentFormat // rolled back: nothing written
		}
		return 0, &NotStoreError{Path: path, Reason: fmt.Sprintf("format %x is none that Upgrade converts", raw)}
	}
	if err := upgradeJournal(tx, path); err != nil {
		return 0, err
	}
	n := 0
	for id, name := range bucketNames {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return n, err
		}
		if bucketID(id) == bMeta {
			continue
		}
		m, err := sealBucket(b, bucketID(id))
		if err != nil {
			return n, err
		}
		n += m
	}
	var last []byte
	if v := meta.Get(metaJournal); v != nil {
		last = bytes.Clone(v)
	}
	if last != nil {
		if len(last) != 8 {
			return n, integrity.Corruptf(bucketMeta, metaJournal, "journal checkpoint is %d bytes", len(last))
		}
		if err := meta.Put(metaJournal, integrity.Seal(nil, bucketMeta, metaJournal, last)); err != nil {
			return n, err
		}
	}
	return n, meta.Put(metaSchema, integrity.Seal(nil, bucketMeta, metaSchema, binary.BigEndian.AppendUint32(nil, schemaVersion)))
}

var errCurrentFormat = errors.New("store: in the current format")

// upgradeJournal applies an old store's journal records after its
// checkpoint (their values without checksums, as the old format has
// them).
func upgradeJournal(tx *bolt.Tx, path string) error {
	data, err := os.ReadFile(path + JournalSuffix)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: upgrade: read journal: %w", err)
	}
	var last uint64
	if v := tx.Bucket(bucketMeta).Get(metaJournal); v != nil {
		if len(v) != 8 {
			return integrity.Corruptf(bucketMeta, metaJournal, "journal checkpoint is %d bytes", len(v))
		}
		last = binary.BigEndian.Uint64(v)
	}
	redo, err := journal.Scan(data, last)
	if err != nil {
		return err
	}
	for _, r := range redo {
		if err := journal.Apply(tx, r[journal.Header:], bucketNames[:]); err != nil {
			return &CorruptError{Bucket: "journal", Offset: -1, What: fmt.Sprintf("record %d: %v", journal.Seq(r), err)}
		}
		last = journal.Seq(r)
	}
	if len(redo) > 0 {
		return tx.Bucket(bucketMeta).Put(metaJournal, binary.BigEndian.AppendUint64(nil, last))
	}
	return nil
}

// sealBucket checks that each of a bucket's old values decodes and puts
// it back with its checksum, a batch of keys at a time (a bucket must not
// change under a cursor going through it).
func sealBucket(b *bolt.Bucket, id bucketID) (int, error) {
	name := bucketNames[id]
	var after []byte
	n := 0
	for {
		type kv struct{ k, v []byte }
		var batch []kv
		c := b.Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else {
			k, v = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(batch) < 1024; k, v = c.Next() {
			if err := checkOldValue(id, k, v); err != nil {
				return n, err
			}
			batch = append(batch, kv{bytes.Clone(k), integrity.Seal(nil, name, k, v)})
		}
		for _, e := range batch {
			if err := b.Put(e.k, e.v); err != nil {
				return n, err
			}
		}
		n += len(batch)
		if len(batch) < 1024 {
			return n, nil
		}
		after = batch[len(batch)-1].k
	}
}

// checkOldValue checks that an old-format value decodes.
func checkOldValue(id bucketID, k, v []byte) error {
	name := bucketNames[id]
	var err error
	switch id {
	case bRuns:
		var r Run
		err = decodeRun(v, &r)
	case bEvents:
		if len(k) < 10 {
			return integrity.Corruptf(name, k, "not an event key")
		}
		_, err = decodeEvent(binary.BigEndian.Uint64(k[len(k)-8:]), v)
	case bAsks:
		var a Ask
		err = decodeAsk(v, &a)
	case bTimers, bHooks, bPlugins:
		var x map[string]any
		err = json.Unmarshal(v, &x)
	case bModules, bSessions:
		_, err = unpackValue(v)
	case bSnapshots, bStates:
		if len(v) < 8 {
			err = fmt.Errorf("%d bytes", len(v))
		}
	}
	if err != nil {
		return integrity.Corruptf(name, k, "old value does not decode, so it is not sealed: %v", err)
	}
	return nil
}
