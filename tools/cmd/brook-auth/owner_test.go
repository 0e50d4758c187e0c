//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/brook-streams/brook/tools/auth"
)

func TestRunOwner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	var out bytes.Buffer
	if err := run([]string{"--dir", dir, "--nodes", "h1", "--owner", "65532"}, &out); err == nil || !strings.Contains(err.Error(), "--owner") {
		t.Errorf("--owner 65532: %v, want a refusal naming --owner", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("giving files to another user needs root")
	}
	if err := run([]string{"--dir", dir, "--nodes", "h1", "--owner", "65532:65532"}, &out); err != nil {
		t.Fatal(err)
	}
	d, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{dir}, d.Files()...) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 || st.Gid != 65532 {
			t.Errorf("%s: owner %d:%d, want 65532:65532", f, st.Uid, st.Gid)
		}
	}
}
