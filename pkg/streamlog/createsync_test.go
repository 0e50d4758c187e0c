package streamlog

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// within fails the test if f does not return within a generous bound: it
// is expected to return at once, and without the fix it never would.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a held fsync", what)
	}
}

// openSyncHeld opens a store in dir whose WAL fsyncs are held, once
// hold.on is set, until hold.release is closed; configure, if set, adjusts
// the store before its goroutines start (openWith).
func openSyncHeld(t *testing.T, dir string, configure func(*impl)) (*Store, *walFault) {
	t.Helper()
	hold := &walFault{kinds: []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
		held: make(chan struct{}, 1), release: make(chan struct{})}
	s, err := openWith(Options{Dir: dir, Logger: quietLogger(), CursorSyncInterval: time.Hour,
		FS: errorfs.Wrap(vfs.Default, hold)}, configure)
	if err != nil {
		t.Fatal(err)
	}
	return s, hold
}

// lookupsGoOn checks, while an fsync is held, that Get finds each of
// found and none of missing, and that Copies holds copies copies.
func lookupsGoOn(t *testing.T, s *Store, found, missing []string, copies int) {
	t.Helper()
	within(t, "Get", func() {
		for _, name := range found {
			if s.Get(name) == nil {
				t.Errorf("Get(%s) = nil", name)
			}
		}
		for _, name := range missing {
			if s.Get(name) != nil {
				t.Errorf("Get(%s) found a copy not yet durable", name)
			}
		}
	})
	within(t, "Copies", func() {
		if n := len(s.Copies()); n != copies {
			t.Errorf("Copies() holds %d, want %d", n, copies)
		}
	})
}

// copyIDs maps each copy's key prefix to its stream, failing the test if
// two copies share one.
func copyIDs(t *testing.T, s *Store) map[uint64]string {
	t.Helper()
	ids := map[uint64]string{}
	for _, c := range s.Copies() {
		if prev, ok := ids[c.id]; ok {
			t.Fatalf("%s and %s share the key prefix %d", prev, c.Stream(), c.id)
		}
		ids[c.id] = c.Stream()
	}
	return ids
}

// TestCreateDoesNotHoldTheStoreAcrossItsSync: while a Create waits for its
// fsync (held here), Get, Copies and other Creates of other names go on
// (issue 17: the store's lock was held across the fsync, so a host's
// creates took one fsync each in turn and every lookup and heartbeat
// waited behind them); the new copy is not found until it is durable; a
// Create of the same name meanwhile waits and then gets that copy (same
// stream id) or ErrExists (another); after a reopen every copy is there
// with an id of its own and new copies get fresh ids.
func TestCreateDoesNotHoldTheStoreAcrossItsSync(t *testing.T) {
	dir := t.TempDir()
	s, hold := openSyncHeld(t, dir, nil)
	mustCreate(t, s, "before", 1)

	hold.on.Store(true)
	var wg sync.WaitGroup
	created := make(map[string]*Copy)
	var mu sync.Mutex
	create := func(name string, id uint64) {
		defer wg.Done()
		c, err := s.Create(name, id, wire.Retention{})
		if err != nil {
			t.Errorf("create %s: %v", name, err)
			return
		}
		mu.Lock()
		created[name] = c
		mu.Unlock()
	}
	wg.Add(1)
	go create("a", 2)
	<-hold.held // a's fsync is held

	lookupsGoOn(t, s, []string{"before"}, []string{"a"}, 1)
	for i, name := range []string{"b", "c", "d"} {
		wg.Add(1)
		go create(name, uint64(3+i))
	}
	// Another create of a, with a's stream id and with another.
	same := make(chan *Copy, 1)
	other := make(chan error, 1)
	go func() { c, _ := s.Create("a", 2, wire.Retention{}); same <- c }()
	go func() { _, err := s.Create("a", 9, wire.Retention{}); other <- err }()

	hold.on.Store(false)
	close(hold.release)
	wg.Wait()
	if got := <-same; got == nil || got != created["a"] {
		t.Fatalf("the second create of a with its stream id got %v, want the first's copy %v", got, created["a"])
	}
	if err := <-other; !errors.Is(err, ErrExists) {
		t.Fatalf("a create of a with another stream id: %v, want ErrExists", err)
	}
	ids := copyIDs(t, s)
	if len(ids) != 5 {
		t.Fatalf("%d copies after the creates, want 5: %v", len(ids), ids)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openTest(t, dir, nil)
	if n := len(s2.Copies()); n != 5 {
		t.Fatalf("%d copies after the reopen, want 5", n)
	}
	for _, c := range s2.Copies() {
		if ids[c.id] != c.Stream() {
			t.Fatalf("after the reopen %s has key prefix %d, before %q had it", c.Stream(), c.id, ids[c.id])
		}
	}
	// A copy deleted, the store reopened: its id is not handed out again.
	var last uint64
	for id := range ids {
		last = max(last, id)
	}
	if err := s2.Delete(ids[last]); err != nil {
		t.Fatal(err)
	}
	e := mustCreate(t, s2, "e", 10)
	if e.id <= last {
		t.Fatalf("a new copy got key prefix %d, not past the last handed out (%d)", e.id, last)
	}
}
