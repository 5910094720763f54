package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The group crash child is this test binary run again with
// groupChildEnv set to the store file: groupWriters goroutines append to a
// run each, with fsync on, and print "committed W N" once Append of
// writer W's batch N returns, until the process is killed.
const groupChildEnv = "SANDFLOW_STORE_GROUP_CHILD"

const groupWriters = 6

func groupRun(w int) string { return "group-" + strconv.Itoa(w) }

// groupBatch is batch n (from 1) of writer w: two events that name it.
func groupBatch(w int, n uint64) Batch {
	data := fmt.Appendf(nil, `{"w":%d,"n":%d}`, w, n)
	at := crashBase.Add(time.Duration(n))
	return Batch{Events: []Event{
		{Seq: 2*n - 1, Time: at, Kind: "step", Data: data},
		{Seq: 2 * n, Time: at, Kind: "done", Data: data},
	}}
}

func groupChild(path string) {
	s, err := Open(path, &Options{LockTimeout: 5 * time.Second})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	var out sync.Mutex
	for w := range groupWriters {
		go func() {
			r, err := s.Run(ctx, groupRun(w))
			if err != nil {
				err = s.CreateRun(ctx, Run{ID: groupRun(w), Status: StatusRunning, CreatedAt: crashBase}, Batch{})
			}
			for n := r.LastSeq/2 + 1; err == nil; n++ {
				if err = s.Append(ctx, groupRun(w), 2*(n-1), groupBatch(w, n)); err == nil {
					out.Lock()
					fmt.Printf("committed %d %d\n", w, n) // unbuffered: the parent has it once written
					out.Unlock()
				}
			}
			out.Lock()
			fmt.Printf("error %v\n", err)
			os.Exit(3)
		}()
	}
	select {}
}

// Writers that share syncs (group commit) lose nothing that returned when
// the process is killed among them: every run holds at least the batches
// its writer reported, each intact, and the file is whole.
func TestGroupCommitCrash(t *testing.T) {
	if path := os.Getenv(groupChildEnv); path != "" {
		groupChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "group.db")
	reported := make([]uint64, groupWriters)
	for round := 1; round <= 3; round++ {
		cmd, stdout := startChild(t, "TestGroupCommitCrash", groupChildEnv, path)
		deadline := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
		lines := 0
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "committed" {
				cmd.Process.Kill()
				t.Fatalf("child said %q", sc.Text())
			}
			w, _ := strconv.Atoi(f[1])
			n, _ := strconv.ParseUint(f[2], 10, 64)
			if w < 0 || w >= groupWriters || n != reported[w]+1 {
				cmd.Process.Kill()
				t.Fatalf("child said %q after batch %d", sc.Text(), reported[w])
			}
			reported[w] = max(reported[w], n)
			if lines++; lines == 150*round {
				cmd.Process.Kill() // SIGKILL, among the writers' appends and syncs
			}
		}
		cmd.Wait()
		deadline.Stop()
		if lines < 150*round {
			t.Fatalf("round %d: the child reported only %d commits", round, lines)
		}
		checkInvariants(t, path)
		s, err := Open(path, &Options{NoSync: true})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		for w := range groupWriters {
			evs, err := s.Events(context.Background(), groupRun(w), 0, 0)
			if err != nil {
				t.Fatalf("round %d, writer %d: %v", round, w, err)
			}
			if uint64(len(evs)) < 2*reported[w] || len(evs)%2 != 0 {
				t.Errorf("round %d, writer %d: %d events, reported %d batches", round, w, len(evs), reported[w])
			}
			for i, e := range evs {
				n := uint64(i/2 + 1)
				if want := groupBatch(w, n).Events[i%2]; diffEvent(e, want) != "" {
					t.Fatalf("round %d, writer %d, event %d: %s", round, w, i+1, diffEvent(e, want))
				}
			}
			reported[w] = uint64(len(evs) / 2) // the next round's writer starts after what is there
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d reported commits; batches per writer %v", round, lines, reported)
	}
}
