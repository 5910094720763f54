package engine

// Optional interfaces of modules and instances, through which the host
// pools instances ahead of demand, resets instances its runs are done
// with, and snapshots suspended ones. An engine implements those it can;
// the host checks for each with a type assertion and does without.

// Poolable is a CompiledModule whose instances are worth keeping ahead of
// demand, initialised on shared sources and handed to runs as they start
// (WebAssembly's, whose instantiation costs milliseconds; a JavaScript
// tool's instance is cheap to make, and a pool of worker processes for
// every program would not be).
type Poolable interface {
	CompiledModule
	Poolable()
}

// SnapshotModule is a CompiledModule that may have snapshotted instances.
type SnapshotModule interface {
	CompiledModule
	// CanSnapshot reports whether an instance's linear memory and mutable
	// globals are its whole state between export calls: no code of the
	// module changes a table or drops a segment. Only then are its
	// instances (Snapshotters) snapshotted or reset.
	CanSnapshot() bool
}

// Snapshotter is an Instance whose state between export calls the host
// can read and restore: its linear memory and its mutable globals (the
// metering rewrite exports them, internal/meter).
type Snapshotter interface {
	Instance
	// Memory is the linear memory, aliased: valid until the next call.
	Memory() []byte
	// GrowMemory grows the linear memory to size bytes, a multiple of the
	// page size no smaller than its size. Errors wrap ErrSnapshot.
	GrowMemory(size uint64) error
	Globals() []uint64
	// SetGlobals sets the mutable globals, as many as Globals returns.
	// Errors wrap ErrSnapshot.
	SetGlobals(g []uint64) error
	// Restorable reports whether memory and globals are still the
	// instance's whole state: false once it is closed (by an error, say).
	Restorable() bool
}

// BaseMapped is a Snapshotter whose memory can be mapped over a base
// image's memory file (Linux), so that a reset costs the pages written
// since the last one instead of a comparison of the whole memory.
type BaseMapped interface {
	Snapshotter
	// ResetToBase makes the memory the image again through its file. It
	// returns false when it cannot (no file, another size, a mapping
	// refused): the host then compares and copies.
	ResetToBase(b *BaseImage) bool
	// OwnChunks returns the indexes of the BaseImageChunk-sized chunks of
	// the memory that may differ from b since the memory was last reset to
	// it, valid until the next call of either method; ok is false when
	// that is not known.
	OwnChunks(b *BaseImage) (chunks []uint32, ok bool)
}

// MemorySizer is an Instance that reports its linear memory's size, what
// parking it holds.
type MemorySizer interface {
	MemorySize() uint64
}
