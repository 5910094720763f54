//go:build unix

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// fakeSandflow writes a shell script that prints help (listing doctor when
// withDoctor) and exits code for the doctor command.
func fakeSandflow(t *testing.T, withDoctor bool, code string) *server {
	t.Helper()
	list := "  asks        List and answer questions\n  serve       Serve the HTTP API\n"
	if withDoctor {
		list += "  doctor      Verify the store\n"
	}
	doctorCase := ""
	if withDoctor {
		doctorCase = "    doctor) echo 'checksum mismatch in run r1'; exit " + code + ";;\n"
	}
	script := "#!/bin/sh\nfor a in \"$@\"; do\n  case \"$a\" in\n" +
		"    --help) printf 'Available Commands:\\n" + list + "'; exit 0;;\n" +
		doctorCase +
		"  esac\ndone\nexit 2\n"
	bin := filepath.Join(t.TempDir(), "sandflow")
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return &server{bin: bin, data: t.TempDir(), agents: "agents.json"}
}

func TestDoctor(t *testing.T) {
	ctx := context.Background()
	t.Run("absent: a finding", func(t *testing.T) {
		if fs := doctor(ctx, fakeSandflow(t, false, "0")); len(fs) != 1 || fs[0].Invariant != InvStoreVerifies {
			t.Errorf("findings %v; want one %s finding", fs, InvStoreVerifies)
		}
	})
	t.Run("clean", func(t *testing.T) {
		if fs := doctor(ctx, fakeSandflow(t, true, "0")); len(fs) != 0 {
			t.Errorf("findings %v; want none", fs)
		}
	})
	t.Run("damage reported", func(t *testing.T) {
		if fs := doctor(ctx, fakeSandflow(t, true, "9")); len(fs) != 1 || fs[0].Invariant != InvStoreVerifies {
			t.Errorf("findings %v; want one %s finding", fs, InvStoreVerifies)
		}
	})
}
