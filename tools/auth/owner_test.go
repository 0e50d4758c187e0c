//go:build unix

package auth_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/brook-streams/brook/tools/auth"
)

func TestParseOwner(t *testing.T) {
	uid, gid, err := auth.ParseOwner("65532:65533")
	if err != nil || uid != 65532 || gid != 65533 {
		t.Errorf("ParseOwner(65532:65533) = %d, %d, %v", uid, gid, err)
	}
	for _, bad := range []string{"", "65532", "a:1", "1:b", "-1:0", "1:-1", ":"} {
		if _, _, err := auth.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q): no error", bad)
		}
	}
}

func TestChown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another user needs root")
	}
	d, err := auth.Generate(filepath.Join(t.TempDir(), "secrets"), auth.Spec{Nodes: []string{"h1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Chown(d, 65532, 65533); err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{d.Dir}, d.Files()...) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		want := os.FileMode(0o600)
		if f == d.Dir {
			want = 0o700 | os.ModeDir
		}
		if st.Uid != 65532 || st.Gid != 65533 || fi.Mode() != want {
			t.Errorf("%s: owner %d:%d mode %v, want 65532:65533 %v", f, st.Uid, st.Gid, fi.Mode(), want)
		}
	}
}
