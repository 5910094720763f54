package engine

import "github.com/sandflow/sandflow/internal/linmem"

// ChunkSize is the granularity, in bytes, at which the host compares an
// instance's memory with a base image (snapshot diffs, resets).
const ChunkSize = 4096

// BaseImage is a plugin's memory just after initialisation on the shared
// sources: what the host resets instances to and diffs snapshots against.
// On Linux it is also kept in a sealed memory file, which an engine whose
// memories are mapped (BaseMapped) maps to reset an instance.
type BaseImage struct {
	mem  []byte
	file *linmem.File // nil where there is none
}

// NewBaseImage returns mem as a base image; mem must not change after.
func NewBaseImage(mem []byte) *BaseImage {
	return &BaseImage{mem: mem, file: linmem.NewFile(mem)}
}

// Bytes is the image's memory; it must not be changed.
func (b *BaseImage) Bytes() []byte { return b.mem }

// HasFile reports whether the image is in a memory file.
func (b *BaseImage) HasFile() bool { return b.file != nil }

// File is the image's memory file, or nil, for the engines of this module.
func (b *BaseImage) File() *linmem.File { return b.file }
