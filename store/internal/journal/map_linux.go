package journal

import "golang.org/x/sys/unix"

// mapJournal reserves the journal file's first mapBytes on disk and
// maps them, so that appending a record is a copy into the page cache
// rather than a write system call. The journal must be empty. Without the
// reservation a write into the mapping could fault for want of disk space
// (SIGBUS), so a file system that cannot reserve leaves the journal
// unmapped, written with pwrite as before.
func (j *File) mapJournal() {
	fd := int(j.f.Fd())
	if unix.Fallocate(fd, 0, 0, mapBytes) != nil {
		return
	}
	m, err := unix.Mmap(fd, 0, mapBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return
	}
	j.m = m
}

// unmapJournal undoes mapJournal before the file closes.
func (j *File) unmapJournal() {
	if j.m != nil {
		_ = unix.Munmap(j.m)
		j.m = nil
	}
}
