package streamlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestDeleteDoesNotHoldTheStoreAcrossItsSync: while a Delete waits for its
// fsync (held here), Get and Copies go on (the store's lock was held
// across the delete's synced batch, so every lookup and heartbeat on the
// host waited behind each delete of a mass recovery, issue 17); the dying
// copy is still found until its deletion is durable; a second Delete of
// the name waits for the first and succeeds; a Create of the name with
// the old stream id waits too and is never handed the dying copy; after
// a reopen the deleted copy is gone and the others are there.
func TestDeleteDoesNotHoldTheStoreAcrossItsSync(t *testing.T) {
	dir := t.TempDir()
	s, hold := openSyncHeld(t, dir, nil)
	old := mustCreate(t, s, "x", 1)
	mustCreate(t, s, "y", 2)

	hold.on.Store(true)
	deleted := make(chan error, 1)
	go func() { deleted <- s.Delete("x") }()
	<-hold.held // the delete's fsync is held

	lookupsGoOn(t, s, []string{"x", "y"}, nil, 2)
	if s.Get("x") != old {
		t.Fatal("Get(x) lost the copy before its deletion was durable")
	}
	again := make(chan error, 1)
	go func() { again <- s.Delete("x") }()
	recreated := make(chan *Copy, 1)
	go func() {
		c, err := s.Create("x", 1, wire.Retention{})
		if err != nil {
			t.Errorf("create x after its delete: %v", err)
		}
		recreated <- c
	}()

	hold.on.Store(false)
	close(hold.release)
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := <-again; err != nil {
		t.Fatalf("second delete: %v", err)
	}
	c := <-recreated
	if c == old || (c != nil && c.id == old.id) {
		t.Fatalf("a create of x during its delete was handed the dying copy (id %d)", old.id)
	}
	if _, err := old.Append(context.Background(), [][]byte{[]byte("r")}); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append to the deleted copy: %v, want ErrDeleted", err)
	}
	// The create and the second delete ran in either order.
	want := map[string]bool{"y": true}
	if got := s.Get("x"); got != nil {
		if got != c {
			t.Fatalf("Get(x) = %v, want the recreated copy %v", got, c)
		}
		want["x"] = true
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir, nil)
	got := map[string]bool{}
	for _, c := range s2.Copies() {
		got[c.Stream()] = true
		if c.Stream() == "x" && c.id == old.id {
			t.Fatalf("the deleted copy of x (id %d) is back after the reopen", old.id)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("copies after the reopen %v, want %v", got, want)
	}
}

// TestCreateAndDeleteAckedAreDurableAcrossCrash: creates and deletes run
// concurrently on a crashable file system; a crash clone taken at a
// random moment holds every copy whose Create returned before the clone
// began (with its stream id) unless its Delete had started, and none
// whose Delete returned; copy ids stay unique, and a new copy after the
// reopen gets an id past all of them.
func TestCreateAndDeleteAckedAreDurableAcrossCrash(t *testing.T) {
	for iter := range 20 {
		fs := vfs.NewCrashableMem()
		s, err := Open(Options{Dir: "/d", Logger: quietLogger(), CursorSyncInterval: time.Hour, FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		type state struct {
			sid                      uint64
			deleting, deleteReturned bool
		}
		var mu sync.Mutex
		acked := map[string]*state{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(iter), uint64(g)))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("s%d-%d", g, i)
					sid := uint64(g*100000 + i + 1)
					if _, err := s.Create(name, sid, wire.Retention{}); err != nil {
						return
					}
					// the same name again, as a duplicate notice would
					if _, err := s.Create(name, sid, wire.Retention{}); err != nil {
						t.Errorf("dup create: %v", err)
						return
					}
					mu.Lock()
					st := &state{sid: sid}
					acked[name] = st
					del := rng.IntN(3) == 0
					st.deleting = del
					mu.Unlock()
					if !del {
						continue
					}
					if err := s.Delete(name); err != nil {
						return
					}
					mu.Lock()
					st.deleteReturned = true
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
		mu.Lock()
		snap := make(map[string]state, len(acked))
		for k, v := range acked {
			snap[k] = *v
		}
		mu.Unlock()
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(iter), 7))})
		close(stop)
		wg.Wait()
		_ = s.Close()

		s2, err := Open(Options{Dir: "/d", Logger: quietLogger(), CursorSyncInterval: time.Hour, FS: clone})
		if err != nil {
			t.Fatalf("iter %d: reopen: %v", iter, err)
		}
		ids := copyIDs(t, s2)
		deletes := 0
		for name, st := range snap {
			c := s2.Get(name)
			switch {
			case st.deleteReturned:
				deletes++
				if c != nil {
					t.Fatalf("iter %d: acked delete of %s undone by the crash", iter, name)
				}
			case !st.deleting:
				if c == nil || c.StreamID() != st.sid {
					t.Fatalf("iter %d: acked create %s (sid %d) lost after crash (%d acked, %d held)", iter, name, st.sid, len(snap), len(ids))
				}
			}
		}
		var last uint64
		for id := range ids {
			last = max(last, id)
		}
		c, err := s2.Create("fresh", 999999999, wire.Retention{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 && c.id <= last {
			t.Fatalf("iter %d: fresh copy id %d reuses <= %d", iter, c.id, last)
		}
		t.Logf("iter %d: %d creates and %d deletes acked before the crash, %d copies held after", iter, len(snap), deletes, len(ids))
		_ = s2.Close()
	}
}
