package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/internal/state"
	"hash/crc32"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/store"
)

// Snapshots of suspended workflow instances. Between export calls a
// guest's whole state is its linear memory and its mutable globals (the
// metering rewrite exports them, internal/meter), plus what the host keeps
// for the instance: the activation and op position it has reached, its
// clock and its random generator. A snapshot holds all of it; restoring
// one into a fresh instance of the same module gives an instance that the
// guest cannot tell from the one that suspended, in time that depends on
// how much memory the guest has touched, not on how long its history is.
//
// Memory is stored as the 4 KiB chunks that differ from the plugin's base
// image (the memory of an instance just initialised on the shared sources,
// preinit.go), compressed with zstd. A restore takes such an instance
// (from the pool when there is one), writes the chunks, sets the globals
// and binds it to the run. A snapshot is a cache: any doubt about it
// (another module, engine or base image, a log that does not reach it, a
// damaged encoding) and the run replays, which stays the truth.

// canSnapshot reports whether the plugin's instances are snapshotted and
// reset: their engine says their memory and globals are their whole state
// (engine.SnapshotModule, engine.Snapshotter).
func canSnapshot(lp *loadedPlugin) bool {
	m, ok := lp.cm.(engine.SnapshotModule)
	return ok && m.CanSnapshot()
}

// snapChunk is the granularity of a snapshot's memory diff.
const snapChunk = engine.ChunkSize

// snapMagic starts an encoded snapshot; the last byte is the format.
var snapMagic = []byte("sfsnap\x00\x01")

// errSnapshot marks a snapshot that cannot be restored here; an engine
// that cannot restore one says so with the same error.
var errSnapshot = engine.ErrSnapshot

// snapImage is a decoded snapshot.
type snapImage struct {
	run         string
	module      string // plugin name, version and module hash
	base        uint32 // CRC-32C of the base image it is a diff against
	baseLen     uint64
	act         int
	cursor      uint32
	clock       int64
	rng         []byte
	outProduced int64
	memSize     uint64
	globals     []uint64
	chunks      []uint32 // indices of the chunks that differ from the base
	data        []byte   // their bytes, in order (zstd in the encoding)
}

// baseImage is a plugin's memory just after initialisation on the shared
// sources, the reference snapshots are diffs against.
type baseImage struct {
	once    sync.Once
	mem     []byte
	img     *engine.BaseImage // mem, in a memory file where there is one
	globals []uint64
	crc     uint32
	err     error
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// base returns the plugin's base image, making it on first use. It is
// made apart from the caller's context: a request cancelled meanwhile must
// not leave the plugin without snapshots for the life of the process.
func (h *Host) base(ctx context.Context, lp *loadedPlugin) (*baseImage, error) {
	b := &lp.base
	b.once.Do(func() {
		ctx := context.WithoutCancel(ctx)
		f, err := h.instantiate(ctx, lp)
		if err != nil {
			b.err = err
			return
		}
		defer f.inst.Close(ctx)
		s, ok := f.inst.(engine.Snapshotter)
		if !ok {
			b.err = fmt.Errorf("%w: engine cannot snapshot", errSnapshot)
			return
		}
		b.mem, b.globals = bytes.Clone(s.Memory()), s.Globals()
		b.crc = crc32.Checksum(b.mem, castagnoli)
		b.img = engine.NewBaseImage(b.mem)
	})
	return b, b.err
}

func moduleKey(lp *loadedPlugin) string {
	return fmt.Sprintf("%s@%d#%s", lp.p.Name, lp.p.Version, lp.p.ModuleHash)
}

// SnapshotStats counts what the host did with snapshots since it opened.
type SnapshotStats struct {
	// Taken: snapshots stored. Restored: activations that began on a
	// restored instance instead of replaying. Refused: snapshots found
	// unusable (another module or base image, damaged), and restored
	// activations that failed and ran again by replay.
	Taken, Restored, Refused int64
	// Images: run states loaded from a state image and the events after
	// it, instead of the whole log (host/internal/state/image.go). ImagesRefused: images
	// found unusable, the whole log read instead. Completed: lazy states
	// completed from the log, because something needed an op or an
	// activation the image left out.
	Images, ImagesRefused, Completed int64
}

type snapCounters struct{ taken, restored, refused atomic.Int64 }

// SnapshotStats reports the host's use of snapshots.
func (h *Host) SnapshotStats() SnapshotStats {
	return SnapshotStats{Taken: h.snaps.taken.Load(), Restored: h.snaps.restored.Load(), Refused: h.snaps.refused.Load(),
		Images: h.images.loaded.Load(), ImagesRefused: h.images.refused.Load(), Completed: h.images.completed.Load()}
}

// DefaultSnapshotOps is Options.Snapshots' default: a shorter history
// replays about as fast as a snapshot restores.
const DefaultSnapshotOps = 64

// snapshotAfter snapshots a suspended instance that is not kept parked
// (the host parks none, or evicted it), whose run's log ended at seq, when the host keeps snapshots
// and the history is long enough to be worth one. The instance's state is
// copied at once; compressing and storing it happen in the background, off
// the resume's path. A snapshot that fails or is not stored yet costs its
// run a replay, or a restore of an older snapshot and a replay of the
// events after it.
//
// ops is how many ops the run's history holds: the caller's count, since
// the run may be moving on when an evicted instance is snapshotted.
//
// It returns the chunks of memory that differ from the base image when it
// took a snapshot (recycle resets those), and nil when it did not.
func (h *Host) snapshotAfter(ctx context.Context, w *wfInstance, seq uint64, ops int) []uint32 {
	if h.opts.Snapshots < 0 || ops < h.opts.Snapshots {
		return nil
	}
	img, err := h.snapshot(ctx, w)
	if err != nil || img == nil {
		return nil
	}
	if img.chunks == nil {
		img.chunks = []uint32{} // not nil: none differ
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return img.chunks
	}
	h.drivers.Add(1)
	h.snapWG.Add(1)
	h.mu.Unlock()
	id := w.rs.ID
	go func() {
		defer h.drivers.Done()
		defer h.snapWG.Done()
		h.snapWriters <- struct{}{}
		defer func() { <-h.snapWriters }()
		if h.store.PutSnapshot(h.life, id, store.Snapshot{Seq: seq, Data: img.encode()}) == nil {
			h.snaps.taken.Add(1)
		}
	}()
	return img.chunks
}

// WaitSnapshots waits until the snapshots being compressed and stored in
// the background are stored: for tests and benchmarks that resume a run
// right after it suspended and want it restored, not replayed.
func (h *Host) WaitSnapshots() { h.snapWG.Wait() }

// saveSnapshot stores a snapshot of a parked instance as the host closes,
// so that its run restores it instead of replaying.
func (h *Host) saveSnapshot(ctx context.Context, w *wfInstance) {
	if h.opts.Snapshots < 0 || int(w.cursor) < h.opts.Snapshots {
		return
	}
	img, err := h.snapshot(ctx, w)
	if err != nil || img == nil {
		return
	}
	if h.store.PutSnapshot(ctx, w.rs.ID, store.Snapshot{Seq: w.parkedSeq, Data: img.encode()}) == nil {
		h.snaps.taken.Add(1)
	}
}

// snapshot copies a suspended instance's state. It returns nil, nil when
// the engine cannot snapshot.
func (h *Host) snapshot(ctx context.Context, w *wfInstance) (*snapImage, error) {
	s, ok := w.inst.(engine.Snapshotter)
	if !ok || !canSnapshot(w.plugin) || !s.Restorable() {
		return nil, nil
	}
	base, err := h.base(ctx, w.plugin)
	if err != nil {
		return nil, err
	}
	rng, err := w.rng.MarshalBinary()
	if err != nil {
		return nil, err
	}
	mem := s.Memory()
	img := snapImage{
		run: w.rs.ID, module: moduleKey(w.plugin), base: base.crc, baseLen: uint64(len(base.mem)),
		act: w.act, cursor: w.cursor, clock: w.clock.now, rng: rng, outProduced: w.outProduced,
		memSize: uint64(len(mem)), globals: s.Globals(),
	}
	var zero [snapChunk]byte
	diff := func(c int) {
		off := c * snapChunk
		end := min(off+snapChunk, len(mem))
		ref := zero[:end-off]
		if off < len(base.mem) {
			ref = base.mem[off:min(end, len(base.mem))]
			if len(ref) < end-off { // the base ends inside the chunk
				ref = append(bytes.Clone(ref), zero[:end-off-len(ref)]...)
			}
		}
		if !bytes.Equal(mem[off:end], ref) {
			img.chunks = append(img.chunks, uint32(c))
			img.data = append(img.data, mem[off:end]...)
		}
	}
	// Where the kernel can say which chunks the instance has written since
	// its memory was last the base image, only those are compared.
	if l, ok := s.(engine.BaseMapped); ok {
		if cs, ok := l.OwnChunks(base.img); ok {
			for _, c := range cs {
				diff(int(c))
			}
			return &img, nil
		}
	}
	for c := range (len(mem) + snapChunk - 1) / snapChunk {
		diff(c)
	}
	return &img, nil
}

var (
	snapEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	snapDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<32))
)

func (img *snapImage) encode() []byte {
	b := append([]byte(nil), snapMagic...)
	b = binary.AppendUvarint(b, uint64(len(img.run)))
	b = append(b, img.run...)
	b = binary.AppendUvarint(b, uint64(len(img.module)))
	b = append(b, img.module...)
	b = binary.LittleEndian.AppendUint32(b, img.base)
	b = binary.AppendUvarint(b, img.baseLen)
	b = binary.AppendUvarint(b, uint64(img.act))
	b = binary.AppendUvarint(b, uint64(img.cursor))
	b = binary.AppendVarint(b, img.clock)
	b = binary.AppendUvarint(b, uint64(len(img.rng)))
	b = append(b, img.rng...)
	b = binary.AppendVarint(b, img.outProduced)
	b = binary.AppendUvarint(b, img.memSize)
	b = binary.AppendUvarint(b, uint64(len(img.globals)))
	for _, g := range img.globals {
		b = binary.LittleEndian.AppendUint64(b, g)
	}
	b = binary.AppendUvarint(b, uint64(len(img.chunks)))
	prev := uint32(0)
	for _, c := range img.chunks {
		b = binary.AppendUvarint(b, uint64(c-prev))
		prev = c
	}
	b = snapEncoder.EncodeAll(img.data, b)
	// A CRC-32C of everything before it: a damaged snapshot is refused,
	// not restored into a guest.
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeSnapshot reads an encoded snapshot of an instance whose memory
// may not pass maxMem bytes; every failure wraps errSnapshot.
func decodeSnapshot(b []byte, maxMem uint64) (*snapImage, error) {
	fail := func(what string) (*snapImage, error) {
		return nil, fmt.Errorf("%w: damaged (%s)", errSnapshot, what)
	}
	if !bytes.HasPrefix(b, snapMagic) || len(b) < len(snapMagic)+4 {
		return fail("magic or format")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(body):]) {
		return fail("checksum")
	}
	r := &snapReader{b: body[len(snapMagic):]}
	img := &snapImage{}
	img.run = string(r.bytes(r.uvarint()))
	img.module = string(r.bytes(r.uvarint()))
	img.base = r.u32()
	img.baseLen = r.uvarint()
	img.act = int(r.uvarint())
	img.cursor = uint32(r.uvarint())
	img.clock = r.varint()
	img.rng = r.bytes(r.uvarint())
	img.outProduced = r.varint()
	img.memSize = r.uvarint()
	n := r.uvarint()
	if n > 1<<16 {
		return fail("globals")
	}
	for range n {
		img.globals = append(img.globals, r.u64())
	}
	if img.memSize > maxMem {
		return nil, fmt.Errorf("%w: its memory (%d bytes) is over the limit (%d)", errSnapshot, img.memSize, maxMem)
	}
	n = r.uvarint()
	if r.err || n > img.memSize/snapChunk+1 || n > uint64(len(r.b)) {
		return fail("chunk count")
	}
	img.chunks = make([]uint32, 0, n)
	c := uint64(0)
	for i := range n {
		d := r.uvarint()
		if i > 0 && d == 0 {
			return fail("chunk order")
		}
		c += d
		if c*snapChunk >= img.memSize {
			return fail("chunk index")
		}
		img.chunks = append(img.chunks, uint32(c))
	}
	if r.err {
		return fail("header")
	}
	want := 0
	for _, c := range img.chunks {
		want += min(snapChunk, int(img.memSize)-int(c)*snapChunk)
	}
	data, err := snapDecoder.DecodeAll(r.b, make([]byte, 0, want))
	if err != nil || len(data) != want {
		return fail("memory")
	}
	img.data = data
	return img, nil
}

type snapReader struct {
	b   []byte
	err bool
}

func (r *snapReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.err, r.b = true, nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapReader) u32() uint32 {
	v := r.bytes(4)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(v)
}

func (r *snapReader) u64() uint64 {
	v := r.bytes(8)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// restore makes the run's workflow instance from its snapshot. It returns
// nil, nil when there is no snapshot to use, and an error wrapping
// errSnapshot when the one there cannot be used: the caller replays.
func (h *Host) restore(ctx context.Context, rs *state.Run, lp *loadedPlugin) (*wfInstance, error) {
	if h.opts.Snapshots < 0 {
		return nil, nil
	}
	if !canSnapshot(lp) {
		return nil, nil
	}
	snap, err := h.store.Snapshot(ctx, rs.ID)
	if errors.Is(err, store.ErrSnapshotNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if h.distrusted(rs.ID, snap.Seq) {
		return nil, nil
	}
	img, err := decodeSnapshot(snap.Data, lp.limits.MemoryBytes)
	if err != nil {
		return nil, err
	}
	switch {
	case img.run != rs.ID:
		return nil, fmt.Errorf("%w: taken of run %q", errSnapshot, img.run)
	case img.module != moduleKey(lp):
		return nil, fmt.Errorf("%w: taken of %s, the run is on %s", errSnapshot, img.module, moduleKey(lp))
	case snap.Seq > rs.LastSeq || img.act > rs.Activation() || int(img.cursor) > len(rs.Ops):
		return nil, fmt.Errorf("%w: it is ahead of the log (event %d, activation %d, op %d)", errSnapshot, snap.Seq, img.act, img.cursor)
	}
	if int(img.cursor) < len(rs.Ops) || img.act+1 < rs.Activation() {
		// The guest replays what came after its snapshot (the activation
		// being begun aside), which a state loaded from an image may have
		// left out.
		if err := rs.Expand(); err != nil {
			return nil, err
		}
	}
	base, err := h.base(ctx, lp)
	if err != nil {
		return nil, err
	}
	if base.crc != img.base || uint64(len(base.mem)) != img.baseLen || img.memSize < img.baseLen {
		return nil, fmt.Errorf("%w: taken against another base image", errSnapshot)
	}
	w := &wfInstance{h: h, rs: rs, plugin: lp, limits: lp.limits, live0: true}
	w.rng = newRNG(rs)
	if err := w.rng.UnmarshalBinary(img.rng); err != nil {
		return nil, fmt.Errorf("%w: generator state: %v", errSnapshot, err)
	}
	w.act, w.cursor, w.clock.now, w.outProduced = img.act, img.cursor, img.clock, img.outProduced
	f, err := h.takeFresh(ctx, lp)
	if err != nil {
		return nil, err
	}
	s, ok := f.inst.(engine.Snapshotter)
	if !ok {
		f.inst.Close(ctx)
		return nil, nil
	}
	if err := restoreInto(s, img, base.mem); err != nil {
		f.inst.Close(ctx)
		return nil, err
	}
	f.b.bind(w)
	w.inst, w.restored = f.inst, true
	return w, nil
}

// restoreInto writes a snapshot into an instance whose memory is the base
// image.
func restoreInto(s engine.Snapshotter, img *snapImage, base []byte) error {
	if err := s.GrowMemory(img.memSize); err != nil {
		return err
	}
	mem := s.Memory()
	if uint64(len(mem)) != img.memSize || len(base) > len(mem) {
		return fmt.Errorf("%w: the instance's memory is not the base image", errSnapshot)
	}
	off := 0
	for _, c := range img.chunks {
		at := int(c) * snapChunk
		n := copy(mem[at:min(at+snapChunk, len(mem))], img.data[off:])
		off += n
	}
	return s.SetGlobals(img.globals)
}

// distrust stops the run's snapshots taken before its log reached seq
// from being restored: an activation failed on one, and the run replays
// instead.
func (h *Host) distrust(runID string, seq uint64) {
	h.snaps.refused.Add(1)
	h.markBad(&h.badSnaps, runID, seq)
}

// markBad notes in *m that the run's images (snapshots or state images)
// up to seq are not to be used.
func (h *Host) markBad(m *map[string]uint64, runID string, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[runID] = max((*m)[runID], seq)
}

func (h *Host) distrusted(runID string, seq uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	bad, ok := h.badSnaps[runID]
	return ok && seq <= bad
}
