//go:build !linux

package store

// mapJournal leaves the journal unmapped where fallocate is not at hand:
// records are written with pwrite.
func (j *journal) mapJournal() {}

func (j *journal) unmapJournal() {}
