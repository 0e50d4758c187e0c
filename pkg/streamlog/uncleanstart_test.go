package streamlog

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestUncleanStart: a new store and one its last process closed start
// clean; one whose process crashed with the store open does not.
func TestUncleanStart(t *testing.T) {
	mem := vfs.NewCrashableMem()
	open := func(fs vfs.FS) *Store {
		t.Helper()
		s, err := Open(Options{Dir: "/db", FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(mem)
	if s.UncleanStart() {
		t.Fatal("a new store starts unclean")
	}
	c, err := s.Create("s", 1, wire.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(context.Background(), [][]byte{[]byte("a")}); err != nil {
		t.Fatal(err)
	}
	// A crash now: the clone holds what was synced, the open mark included.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(mem)
	if s.UncleanStart() {
		t.Fatal("a store its last process closed starts unclean")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(crashed)
	defer func() { _ = s.Close() }()
	if !s.UncleanStart() {
		t.Fatal("a store whose process crashed starts clean")
	}
}
