package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

func doctorCmd(a *app) *cobra.Command {
	var upgrade bool
	c := &cobra.Command{
		Use:   "doctor [--json] [--data DIR] [--upgrade]",
		Short: "Check the data directory for damage, changing nothing",
		Long: `Doctor checks the data directory, read-only: every page of the store
file, every stored value against its checksum, every run's log (events
1..n with no gap), every index entry against the run it names, the
journal (damage anywhere but in a torn last write), and the compile
cache's entries against their checksums. It lists each finding (where,
and what) and repairs nothing.

Exits 0 when nothing is damaged and 9 when something is (8 when another
sandflow process has the directory open to write).

--upgrade first converts a store from before checksums (format 3 or
older, which other commands refuse) in place, in one transaction; back
the file up first.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.storeURL != "" {
				return withCode(exitUsage, errors.New("doctor checks the embedded store of a data directory; a PostgreSQL store (--store) is checked by the database server"))
			}
			if upgrade {
				n, err := store.Upgrade(filepath.Join(a.dataDir, "sandflow.db"))
				if err != nil {
					return err
				}
				if !a.asJSON {
					fmt.Fprintf(a.out, "upgraded: %d values sealed with checksums\n", n)
				}
			}
			rep, err := host.VerifyDir(cmd.Context(), a.dataDir)
			if err != nil {
				if errors.Is(err, store.ErrLocked) {
					return withCode(exitLocked, fmt.Errorf("%w (doctor reads only while no other sandflow process writes)", err))
				}
				return err
			}
			if a.asJSON {
				if err := a.printJSON(struct {
					OK bool `json:"ok"`
					*host.DirReport
				}{rep.OK(), rep}); err != nil {
					return err
				}
			} else {
				printDoctor(a, rep)
			}
			if !rep.OK() {
				n := len(rep.Store.Findings) + rep.Store.Omitted + len(rep.CacheFindings)
				return withCode(exitDamaged, fmt.Errorf("%s: %d damaged", a.dataDir, n))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&upgrade, "upgrade", false, "first convert a store from before checksums (format 3 or older)")
	return c
}

func printDoctor(a *app, rep *host.DirReport) {
	s := rep.Store
	values := 0
	buckets := make([]string, 0, len(s.Values))
	for b, n := range s.Values {
		values += n
		buckets = append(buckets, b)
	}
	sort.Strings(buckets)
	fmt.Fprintf(a.out, "store %s\n", s.Path)
	fmt.Fprintf(a.out, "  pages checked     %d\n", s.Pages)
	fmt.Fprintf(a.out, "  values checked    %d (", values)
	for i, b := range buckets {
		if i > 0 {
			fmt.Fprint(a.out, ", ")
		}
		fmt.Fprintf(a.out, "%s %d", b, s.Values[b])
	}
	fmt.Fprintln(a.out, ")")
	fmt.Fprintf(a.out, "  runs              %d, events %d\n", s.Runs, s.Events)
	if s.JournalRecords > 0 {
		fmt.Fprintf(a.out, "  journal           %d writes to recover at the next read-write open (not damage)\n", s.JournalRecords)
	}
	fmt.Fprintf(a.out, "compile cache       %d entries\n", rep.CacheEntries)
	if rep.OK() {
		fmt.Fprintln(a.out, "ok: nothing damaged")
		return
	}
	fmt.Fprintln(a.out, "DAMAGED:")
	for _, f := range s.Findings {
		fmt.Fprintf(a.out, "  %s\n", f)
	}
	if s.Omitted > 0 {
		fmt.Fprintf(a.out, "  ... and %d more\n", s.Omitted)
	}
	for _, f := range rep.CacheFindings {
		fmt.Fprintf(a.out, "  cache %s: %s\n", f.Path, f.What)
	}
}
