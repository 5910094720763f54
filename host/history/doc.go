// Package history is the public schema of a run's event log: the kinds of
// event the host writes, the data each carries (Data), the codec that
// writes and reads that data (json.Marshal's bytes, without its
// reflection on the hot kinds), a run record's detail, the history file
// that `sandflow runs export` writes (File, Read), and the one-line
// rendering of an event in a run's timeline (Describe).
//
// abi/HISTORY.md documents every kind and every field; the host's tests
// hold that document to this package. The host, its HTTP API and its CLI
// all read and write the log through this package.
package history
