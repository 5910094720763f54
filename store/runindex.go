package store

import (
	"github.com/sandflow/sandflow/store/internal/runindex"
	bolt "go.etcd.io/bbolt"
)

// The runs' index (internal/runindex) is built from the runs bucket on
// the first Runs or RunCounts call (Bolt.indexRuns) and kept current by
// every write of a run record after (Bolt.apply1). What follows is the
// store's side of it: the records read into entries, and the filters
// into queries.

// indexEntry is what the index keeps of run record r.
func indexEntry(r *Run) runindex.Entry {
	return runindex.Entry{Created: r.CreatedAt, ID: r.ID, Status: string(r.Status), Tool: r.Tool}
}

// buildIndex reads every run record of tx into x.
func buildIndex(x *runindex.Index, tx *bolt.Tx) error {
	var es []*runindex.Entry
	err := tx.Bucket(bucketRuns).ForEach(func(k, sv []byte) error {
		var r Run
		if err := decodeRunValue(k, sv, &r); err != nil {
			return err
		}
		e := indexEntry(&r)
		es = append(es, &e)
		return nil
	})
	if err != nil {
		return err
	}
	x.Build(es)
	return nil
}

// runQuery is the index's query for f.
func runQuery(f RunFilter) runindex.Query {
	q := runindex.Query{Status: string(f.Status), Tool: f.Tool, From: f.From, To: f.To, Limit: f.Limit}
	if f.Before != nil {
		q.Before = &runindex.Entry{Created: f.Before.CreatedAt, ID: f.Before.ID}
	}
	return q
}

// runCounts are the index's counts as RunCounter gives them.
func runCounts(cs []runindex.Count) []RunCount {
	out := make([]RunCount, len(cs))
	for i, c := range cs {
		out[i] = RunCount{Status: RunStatus(c.Status), Tool: c.Tool, N: c.N}
	}
	return out
}

var _ RunCounter = (*Bolt)(nil)
