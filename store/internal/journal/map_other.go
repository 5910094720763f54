//go:build !linux

package journal

// mapJournal leaves the journal unmapped where fallocate is not at hand:
// records are written with pwrite.
func (j *File) mapJournal() {}

func (j *File) unmapJournal() {}
