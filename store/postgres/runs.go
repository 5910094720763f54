package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/store"
)

// batchRows is a batch checked and encoded, ready to be written: the
// columns of its events, its run record, and its index changes.
type batchRows struct {
	runID   string
	channel string // the store's LISTEN/NOTIFY channel
	commits string // its commit notices' channel, "" when they are off
	lease   *store.Lease
	// Event columns, one element per event.
	seqs   []int64
	times  []int64
	kinds  [][]byte
	zstd   []bool
	data   [][]byte
	rec    store.Run
	record []byte
	state  *store.State
	// Timers put (one per key, the batch's last wins) and deleted.
	putFire            []int64
	putIDs, putRecords [][]byte
	delFire            []int64
	delIDs             [][]byte
	asks               []askRow
	release            [][]byte
	claims             []store.Hook
}

type askRow struct {
	a      store.Ask
	record []byte
}

// encodeBatch checks batch b of run runID, whose log ends at last, with
// rec the run record it leaves, in the order the embedded store checks
// it, and encodes it. Every refusal is store.ErrBadBatch.
func (s *Store) encodeBatch(runID string, last uint64, rec store.Run, b store.Batch) (*batchRows, error) {
	w := &batchRows{runID: runID, channel: s.channel, lease: b.Lease}
	n := len(b.Events)
	w.seqs, w.times, w.kinds, w.zstd, w.data = make([]int64, n), make([]int64, n), make([][]byte, n), make([]bool, n), make([][]byte, n)
	for i, e := range b.Events {
		want := last + uint64(i) + 1
		if e.Seq != want || want > math.MaxInt64 {
			return nil, fmt.Errorf("%w: event %d of run %s should have seq %d", store.ErrBadBatch, e.Seq, runID, want)
		}
		if len(e.Kind) == 0 || len(e.Kind) > 255 {
			return nil, fmt.Errorf("%w: event kind %q must be 1-255 bytes", store.ErrBadBatch, e.Kind)
		}
		if err := checkTime(e.Time, "event time"); err != nil {
			return nil, err
		}
		w.seqs[i], w.times[i], w.kinds[i] = int64(e.Seq), e.Time.UnixNano(), []byte(e.Kind)
		w.data[i], w.zstd[i] = pack(e.Data, s.threshold)
	}
	newLast := last + uint64(n)
	if rec.ID != runID || rec.LastSeq != newLast {
		return nil, fmt.Errorf("%w: run record %s at seq %d does not match log at %d", store.ErrBadBatch, rec.ID, rec.LastSeq, newLast)
	}
	rec.CreatedAt, rec.UpdatedAt = rec.CreatedAt.UTC(), rec.UpdatedAt.UTC()
	var err error
	if w.record, err = json.Marshal(rec); err != nil {
		return nil, fmt.Errorf("%w: run record: %v", store.ErrBadBatch, err)
	}
	w.rec = rec
	if s.notifyCommits {
		w.commits = s.commitChannel
	}
	if ps := b.PutState; ps != nil && !rec.Status.Terminal() {
		if ps.Seq != newLast {
			return nil, fmt.Errorf("%w: state image of run %s at seq %d, the batch ends at %d", store.ErrBadBatch, runID, ps.Seq, newLast)
		}
		w.state = ps
	}
	if err := w.encodeTimers(b.PutTimers, b.DeleteTimers); err != nil {
		return nil, err
	}
	for _, a := range b.PutAsks {
		if a.RunID != runID || a.ID == "" {
			return nil, fmt.Errorf("%w: question %q for run %s in a batch of run %s", store.ErrBadBatch, a.ID, a.RunID, runID)
		}
		a.CreatedAt = a.CreatedAt.UTC()
		v, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("%w: question %s: %v", store.ErrBadBatch, a.ID, err)
		}
		w.asks = append(w.asks, askRow{a, v})
	}
	for _, tok := range b.ReleaseHooks {
		w.release = append(w.release, []byte(tok))
	}
	for _, c := range b.ClaimHooks {
		if c.Token == "" || c.RunID != runID {
			return nil, fmt.Errorf("%w: hook claim %+v in a batch of run %s", store.ErrBadBatch, c, runID)
		}
		w.claims = append(w.claims, c)
	}
	return w, nil
}

// encodeTimers checks and encodes a batch's timers to put and delete;
// a timer put twice keeps its last record.
func (w *batchRows) encodeTimers(put, del []store.Timer) error {
	type timerKey struct {
		fire int64
		id   string
	}
	at := map[timerKey]int{}
	for _, t := range put {
		if t.RunID != w.runID {
			return fmt.Errorf("%w: timer for run %s in a batch of run %s", store.ErrBadBatch, t.RunID, w.runID)
		}
		if err := checkTime(t.FireAt, "timer"); err != nil {
			return err
		}
		t.FireAt = t.FireAt.UTC()
		v, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("%w: timer %s: %v", store.ErrBadBatch, t.ID, err)
		}
		k := timerKey{t.FireAt.UnixNano(), t.ID}
		if i, ok := at[k]; ok {
			w.putRecords[i] = v
			continue
		}
		at[k] = len(w.putFire)
		w.putFire, w.putIDs, w.putRecords = append(w.putFire, k.fire), append(w.putIDs, []byte(t.ID)), append(w.putRecords, v)
	}
	for _, t := range del {
		if t.RunID != w.runID {
			return fmt.Errorf("%w: deleting a timer of run %s in a batch of run %s", store.ErrBadBatch, t.RunID, w.runID)
		}
		w.delFire, w.delIDs = append(w.delFire, clampNanos(t.FireAt)), append(w.delIDs, []byte(t.ID))
	}
	return nil
}

// runColumns are the run's columns after the id, in the order
// insertRun and updateRun take them.
func (w *batchRows) runColumns() []any {
	cs, cn := secNanos(w.rec.CreatedAt)
	return []any{w.runID, []byte(w.rec.Status), []byte(w.rec.Tool), []byte(w.rec.Plugin), int64(w.rec.Version), cs, cn, int64(w.rec.LastSeq), w.record}
}

const insertRun = `INSERT INTO runs (id, status, tool, plugin, version, created_s, created_n, last_seq, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING`

const updateRun = `UPDATE runs SET status = $2, tool = $3, plugin = $4, version = $5, created_s = $6,
created_n = $7, last_seq = $8, record = $9 WHERE id = $1`

// statements is a pgx batch whose statements each have a check of the
// rows they touched (nil: none).
type statements struct {
	q      pgx.Batch
	checks []func(ct int64) error
}

func (st *statements) add(c func(ct int64) error, sql string, args ...any) {
	st.q.Queue(sql, args...)
	st.checks = append(st.checks, c)
}

// write sends the batch's statements in one round trip, after the run's
// own (insertRun or updateRun), and checks what each did.
func (w *batchRows) write(ctx context.Context, tx pgx.Tx, runSQL string, created bool) error {
	var st statements
	w.queueRun(&st, runSQL, created)
	w.queueIndexes(&st, created)
	if created {
		// Hosts listening claim the new run if its creator does not drive
		// it at once.
		st.add(nil, `SELECT pg_notify($1, $2)`, w.channel, w.runID)
	}
	if w.commits != "" {
		// One notice per transaction, the run's creation included: the
		// hosts following the run read what it committed.
		st.add(nil, `SELECT pg_notify($1, $2)`, w.commits, w.runID)
	}
	br := tx.SendBatch(ctx, &st.q)
	var err error
	for _, c := range st.checks {
		ct, e := br.Exec()
		switch {
		case e != nil:
			if isUnique(e, "events_pkey") {
				e = fmt.Errorf("%w: run %s already has events after %d", store.ErrSeqConflict, w.runID, w.rec.LastSeq-uint64(len(w.seqs)))
			}
			err = e
		case c != nil:
			err = c(ct.RowsAffected())
		}
		if err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queueRun queues the lease check, the run's row and its events.
func (w *batchRows) queueRun(st *statements, runSQL string, created bool) {
	if w.lease != nil {
		// After the run's row lock (or, for a new run, before its row
		// exists): a lease taken before this statement is seen, and the
		// host that took it appends only after this transaction (the row
		// lock) and from where it left the log (the seq check). The lease
		// row is read, not locked: a lock would make the holder's renewals
		// wait behind its own appends.
		l := *w.lease
		st.add(func(ct int64) error {
			if ct == 0 {
				return fmt.Errorf("%w: run %s, epoch %d of %s", store.ErrLeaseLost, w.runID, l.Epoch, l.Owner)
			}
			return nil
		}, `SELECT 1 FROM leases WHERE run_id = $1 AND epoch = $2 AND owner = $3`, w.runID, int64(l.Epoch), []byte(l.Owner))
	}
	st.add(func(ct int64) error {
		if ct == 0 && created {
			return fmt.Errorf("%w: %s", store.ErrRunExists, w.runID)
		}
		return nil
	}, runSQL, w.runColumns()...)
	if len(w.seqs) > 0 {
		var epoch int64
		if w.lease != nil {
			epoch = int64(w.lease.Epoch)
		}
		st.add(nil, `INSERT INTO events (run_id, seq, time_ns, kind, zstd, data, epoch)
SELECT $1, *, $7 FROM unnest($2::bigint[], $3::bigint[], $4::bytea[], $5::boolean[], $6::bytea[])`,
			w.runID, w.seqs, w.times, w.kinds, w.zstd, w.data, epoch)
	}
}

// queueIndexes queues the batch's changes to the run's images, timers,
// questions and hooks.
func (w *batchRows) queueIndexes(st *statements, created bool) {
	if w.rec.Status.Terminal() {
		if !created {
			st.add(nil, `DELETE FROM snapshots WHERE run_id = $1`, w.runID)
			st.add(nil, `DELETE FROM states WHERE run_id = $1`, w.runID)
		}
	} else if w.state != nil {
		st.add(nil, `INSERT INTO states (run_id, seq, data) VALUES ($1, $2, $3)
ON CONFLICT (run_id) DO UPDATE SET seq = EXCLUDED.seq, data = EXCLUDED.data`, w.runID, int64(w.state.Seq), nonNil(w.state.Data))
	}
	if len(w.putFire) > 0 {
		st.add(nil, `INSERT INTO timers (fire_ns, run_id, id, record)
SELECT f, $1, i, r FROM unnest($2::bigint[], $3::bytea[], $4::bytea[]) AS u (f, i, r)
ON CONFLICT (fire_ns, run_id, id) DO UPDATE SET record = EXCLUDED.record`, w.runID, w.putFire, w.putIDs, w.putRecords)
	}
	if len(w.delFire) > 0 {
		st.add(nil, `DELETE FROM timers t USING unnest($2::bigint[], $3::bytea[]) AS d (f, i)
WHERE t.run_id = $1 AND t.fire_ns = d.f AND t.id = d.i`, w.runID, w.delFire, w.delIDs)
	}
	for _, a := range w.asks {
		cs, cn := secNanos(a.a.CreatedAt)
		id := a.a.ID
		st.add(func(ct int64) error {
			if ct == 0 {
				return fmt.Errorf("%w: question %s belongs to another run", store.ErrBadBatch, id)
			}
			return nil
		}, `INSERT INTO asks (id, run_id, open, created_s, created_n, record) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET open = EXCLUDED.open, created_s = EXCLUDED.created_s,
created_n = EXCLUDED.created_n, record = EXCLUDED.record WHERE asks.run_id = EXCLUDED.run_id`,
			[]byte(id), w.runID, a.a.Open, cs, cn, a.record)
	}
	if len(w.release) > 0 {
		st.add(nil, `DELETE FROM hooks WHERE run_id = $1 AND token = ANY($2::bytea[])`, []byte(w.runID), w.release)
	}
	for _, c := range w.claims {
		tok := c.Token
		st.add(func(ct int64) error {
			if ct == 0 {
				return fmt.Errorf("%w: %q is held by another run", store.ErrHookTaken, tok)
			}
			return nil
		}, claimSQL, []byte(c.Token), []byte(c.RunID), int64(c.HookID))
	}
}

// claimSQL gives a token to a run's hook unless another run holds it:
// no row is changed then.
const claimSQL = `INSERT INTO hooks (token, run_id, hook_id) VALUES ($1, $2, $3)
ON CONFLICT (token) DO UPDATE SET hook_id = EXCLUDED.hook_id WHERE hooks.run_id = EXCLUDED.run_id`

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, run store.Run, b store.Batch) error {
	if err := store.ValidRunID(run.ID); err != nil {
		return err
	}
	rec := run
	if b.Run != nil {
		rec = *b.Run
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		w, err := s.encodeBatch(run.ID, 0, rec, b)
		if err != nil {
			var exists bool
			if qerr := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`, run.ID).Scan(&exists); qerr != nil {
				return qerr
			}
			if exists {
				return fmt.Errorf("%w: %s", store.ErrRunExists, run.ID)
			}
			return err
		}
		return w.write(ctx, tx, insertRun, true)
	})
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, expectLastSeq uint64, b store.Batch) error {
	if err := runExists(runID); err != nil {
		return s.closedOr(err)
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		// The row lock orders the writers of one run: the second reads
		// the log's end the first committed.
		var last int64
		var record []byte
		err := tx.QueryRow(ctx, `SELECT last_seq, record FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&last, &record)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrRunNotFound, runID)
		}
		if err != nil {
			return err
		}
		if uint64(last) != expectLastSeq {
			return fmt.Errorf("%w: run %s is at event %d, not %d", store.ErrSeqConflict, runID, last, expectLastSeq)
		}
		var rec store.Run
		if b.Run != nil {
			rec = *b.Run
		} else {
			if err := json.Unmarshal(record, &rec); err != nil {
				return fmt.Errorf("%w: run %s: %v", store.ErrCorrupt, runID, err)
			}
			if len(b.Events) > 0 {
				rec.LastSeq = b.Events[len(b.Events)-1].Seq
			}
		}
		w, err := s.encodeBatch(runID, expectLastSeq, rec, b)
		if err != nil {
			return err
		}
		return w.write(ctx, tx, updateRun, false)
	})
}

// Run implements store.Store.
func (s *Store) Run(ctx context.Context, id string) (store.Run, error) {
	var r store.Run
	if err := runExists(id); err != nil {
		return r, s.closedOr(err)
	}
	err := s.read(ctx, func(c *pgx.Conn) error {
		var record []byte
		err := c.QueryRow(ctx, `SELECT record FROM runs WHERE id = $1`, id).Scan(&record)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrRunNotFound, id)
		}
		if err != nil {
			return err
		}
		return decodeRun(record, &r)
	})
	return r, err
}

func decodeRun(record []byte, r *store.Run) error {
	*r = store.Run{}
	if err := json.Unmarshal(record, r); err != nil {
		return fmt.Errorf("%w: run record: %v", store.ErrCorrupt, err)
	}
	return nil
}

// Runs implements store.Store.
func (s *Store) Runs(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	var out []store.Run
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		var status, tool, limit any
		if f.Status != "" {
			status = []byte(f.Status)
		}
		if f.Tool != "" {
			tool = []byte(f.Tool)
		}
		if f.Limit > 0 {
			limit = int64(f.Limit)
		}
		// Each bound is a row comparison on (created_s, created_n, id),
		// which the runs_created index serves in order.
		var fromS, fromN, toS, toN, curS, curN, curID any
		if !f.From.IsZero() {
			fromS, fromN = secNanos(f.From)
		}
		if !f.To.IsZero() {
			toS, toN = secNanos(f.To)
		}
		if f.Before != nil {
			curS, curN = secNanos(f.Before.CreatedAt)
			curID = f.Before.ID
		}
		rows, err := c.Query(ctx, `SELECT record FROM runs
WHERE ($1::bytea IS NULL OR status = $1) AND ($2::bytea IS NULL OR tool = $2)
AND ($4::bigint IS NULL OR (created_s, created_n) >= ($4, $5::integer))
AND ($6::bigint IS NULL OR (created_s, created_n) < ($6, $7::integer))
AND ($8::bigint IS NULL OR (created_s, created_n, id) < ($8, $9::integer, $10::text))
ORDER BY created_s DESC, created_n DESC, id DESC LIMIT $3`, status, tool, limit, fromS, fromN, toS, toN, curS, curN, curID)
		if err != nil {
			return err
		}
		var record []byte
		_, err = pgx.ForEachRow(rows, []any{&record}, func() error {
			var r store.Run
			if err := decodeRun(record, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
		return err
	})
	return out, err
}

// RunCounts implements store.RunCounter: one aggregate over the runs.
func (s *Store) RunCounts(ctx context.Context) ([]store.RunCount, error) {
	var out []store.RunCount
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, `SELECT status, tool, count(*) FROM runs GROUP BY status, tool ORDER BY status, tool`)
		if err != nil {
			return err
		}
		var status, tool []byte
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&status, &tool, &n}, func() error {
			out = append(out, store.RunCount{Status: store.RunStatus(status), Tool: string(tool), N: int(n)})
			return nil
		})
		return err
	})
	return out, err
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]store.Event, error) {
	var out []store.Event
	if err := runExists(runID); err != nil {
		return nil, s.closedOr(err)
	}
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		if after < math.MaxInt64 {
			var lim any
			if limit > 0 {
				lim = int64(limit)
			}
			rows, err := c.Query(ctx, `SELECT seq, time_ns, kind, zstd, data FROM events
WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, runID, int64(after), lim)
			if err != nil {
				return err
			}
			kinds := map[string]string{}
			var seq, ns int64
			var kind, data []byte
			var z bool
			_, err = pgx.ForEachRow(rows, []any{&seq, &ns, &kind, &z, &data}, func() error {
				k, ok := kinds[string(kind)]
				if !ok {
					k = string(kind)
					kinds[k] = k
				}
				d, err := unpack(data, z)
				if err != nil {
					return fmt.Errorf("event %d of run %s: %w", seq, runID, err)
				}
				out = append(out, store.Event{Seq: uint64(seq), Time: time.Unix(0, ns).UTC(), Kind: k, Data: d})
				return nil
			})
			if err != nil || len(out) > 0 {
				return err
			}
		}
		// No events: the run may not exist.
		var exists bool
		if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`, runID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%w: %s", store.ErrRunNotFound, runID)
		}
		return nil
	})
	return out, err
}

// runExists returns store.ErrRunNotFound for an id no run can have, which
// is not sent to the server: a run id column is text, which cannot hold
// every string.
func runExists(id string) error {
	if store.ValidRunID(id) != nil {
		return fmt.Errorf("%w: %q", store.ErrRunNotFound, id)
	}
	return nil
}
