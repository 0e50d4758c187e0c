//go:build unix

package streamlog

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStoreDirectoryMode: a new store's directory is 0700 whatever the
// umask, and with the umask services set (svcconfig.RestrictFileModes,
// 0o077) no file of the store has a group or other bit.
func TestStoreDirectoryMode(t *testing.T) {
	for _, umask := range []int{0o022, 0o077} {
		old := syscall.Umask(umask)
		dir := filepath.Join(t.TempDir(), "data", "h1")
		s := openTest(t, dir, nil)
		c := mustCreate(t, s, "orders", 1)
		if err := c.BeginEpoch(1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(context.Background(), [][]byte{[]byte("a"), []byte("b")}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		syscall.Umask(old)

		for _, d := range []string{dir, filepath.Dir(dir)} {
			st, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != 0o700 {
				t.Errorf("umask %#o: directory %s has mode %#o, want 0700", umask, d, got)
			}
		}
		if umask != 0o077 {
			continue
		}
		files := 0
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			if m := info.Mode().Perm(); m&0o077 != 0 {
				t.Errorf("umask %#o: %s has mode %#o, want no group or other bits", umask, strings.TrimPrefix(p, dir), m)
			}
			if !e.IsDir() {
				files++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if files == 0 {
			t.Fatal("the store wrote no files")
		}
	}
}
