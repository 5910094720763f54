package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

// uploadSectionOrder is the order of the module's sections by id.
var uploadSectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// uploadSplice inserts a section into a module where the section order
// puts it.
func uploadSplice(mod []byte, id byte, body []byte) []byte {
	off := 8
	for off < len(mod) {
		if uploadSectionOrder[mod[off]] > uploadSectionOrder[id] {
			break
		}
		size, n := uint32(0), 0
		for shift := 0; ; shift += 7 {
			c := mod[off+1+n]
			n++
			size |= uint32(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
		off += 1 + n + int(size)
	}
	sec := append([]byte{id, byte(len(body))}, body...) // bodies here are < 128 bytes
	return append(append(append([]byte(nil), mod[:off]...), sec...), mod[off:]...)
}

// uploadHugeCounts are guests that CheckModule accepts, each with one
// section (that Parse does not read) whose vector count, or name length,
// is 2^32-1.
func uploadHugeCounts() map[string][]byte {
	g := wasmtest.Guest(wasmtest.ReturnOne)
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	return map[string][]byte{
		// A custom section's name length, which wazero allocates.
		"custom":  uploadSplice(g, 0, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, '0'}),
		"data":    uploadSplice(g, 11, huge),
		"element": uploadSplice(g, 9, huge),
		"global":  uploadSplice(g, 6, huge),
		"table":   uploadSplice(g, 4, huge),
	}
}

// A plugin upload whose module claims a vector of 2^32-1 entries (or a name
// of 2^32-1 bytes) in a section CheckModule does not parse cannot take the
// host down: the module is refused, at the check or by the engine, and
// never makes the engine allocate by the claimed count (a 117-byte guest
// whose data section says it holds 2^32-1 segments would ask for about
// 240 GB, an out-of-memory that no recover catches). The same holds for
// CheckReplay with a module. Each module runs in a child process, which
// also fails on an allocation over 256 MiB, so that a crash is observed,
// not suffered.
func TestRegressionAddPluginHugeVectorCount(t *testing.T) {
	mods := uploadHugeCounts()
	if name := os.Getenv("SANDFLOW_UPLOAD_CHILD"); name != "" {
		uploadChild(t, mods[name])
		return
	}
	for name, mod := range mods {
		t.Run(name, func(t *testing.T) {
			if err := host.CheckModule(mod); err != nil {
				return // refused at the check: fixed
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestRegressionAddPluginHugeVectorCount$", "-test.count=1")
			cmd.Env = append(os.Environ(), "SANDFLOW_UPLOAD_CHILD="+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				if i := bytes.Index(out, []byte("fatal error")); i >= 0 {
					out = out[i:min(len(out), i+200)]
				}
				t.Fatalf("AddPlugin of a %d-byte module with a %s section claiming 2^32-1 entries or bytes, which CheckModule accepts, fails the process: %v\n%s", len(mod), name, err, out)
			}
		})
	}
}

// uploadChild adds mod as a plugin on a fresh host; a refusal is fine, a
// crash or an allocation out of proportion with the module is not.
func uploadChild(t *testing.T, mod []byte) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := host.Open(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	m := host.Manifest{Name: "huge", Entry: host.EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`)}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	_, err = h.AddPlugin(ctx, mod, m)
	runtime.ReadMemStats(&ms)
	fmt.Printf("AddPlugin returned %v after allocating %d MiB\n", err, (ms.TotalAlloc-before)>>20)
	if err != nil && !errors.Is(err, host.ErrBadPlugin) {
		t.Fatalf("AddPlugin refused with %v, which does not wrap ErrBadPlugin", err)
	}
	if n := ms.TotalAlloc - before; n > 256<<20 {
		t.Fatalf("AddPlugin of a %d-byte module allocated %d MiB", len(mod), n>>20)
	}
}
