package streamlog

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestBeginEpochAsync: BeginEpochAsync returns with the copy at the new
// epoch (its seal released) while the WAL sync of its write is held; its
// durable channel stays open meanwhile, and a repeated call hands back the
// same pending channel. A crash then (only what was synced survives) finds
// the copy sealed at its old epoch: the begin was not durable. Once the
// sync ends the channel closes, and a crash after that finds the copy at
// the new epoch with the record appended after the begin.
func TestBeginEpochAsync(t *testing.T) {
	mem, fault, open, s, c := sealedBeforeBegin(t)

	fault.on.Store(true)
	type begun struct {
		durable <-chan struct{}
		err     error
	}
	got := make(chan begun, 1)
	go func() {
		d, err := c.BeginEpochAsync(2)
		got <- begun{d, err}
	}()
	var b begun
	select {
	case b = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("BeginEpochAsync waited for its WAL sync")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if _, sealed := c.SealInfo(); sealed || c.Epoch() != 2 {
		t.Fatalf("after BeginEpochAsync(2): epoch %d, sealed %v; want epoch 2, not sealed", c.Epoch(), sealed)
	}
	<-fault.held
	if isClosed(b.durable) {
		t.Fatal("durable closed while the begin's WAL sync is held")
	}
	if again, err := c.BeginEpochAsync(2); err != nil || again != b.durable {
		t.Fatalf("a repeated BeginEpochAsync(2): %v, same pending channel %v", err, again == b.durable)
	}

	// A crash now loses the begin.
	lost := mem.CrashClone(vfs.CrashCloneCfg{})
	appended := make(chan error, 1)
	go func() {
		_, err := c.Append(context.Background(), payloads("b", 0, 1))
		appended <- err
	}()
	close(fault.release)
	select {
	case <-b.durable:
	case <-time.After(10 * time.Second):
		t.Fatal("durable not closed after the WAL sync ended")
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	kept := mem.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		fs     vfs.FS
		epoch  uint64
		sealed bool
		tail   uint64
	}{
		{"crash before the sync: the begin is lost", lost, 1, true, 3},
		{"crash after it: the begin and the next record are kept", kept, 2, false, 4},
	} {
		s := open(tc.fs)
		c := s.Get("s")
		seal, sealed := c.SealInfo()
		if c.Epoch() != tc.epoch || sealed != tc.sealed || c.Tails().Record != tc.tail {
			t.Errorf("%s: epoch %d, sealed %v (%+v), record tail %d; want epoch %d, sealed %v, tail %d",
				tc.name, c.Epoch(), sealed, seal, c.Tails().Record, tc.epoch, tc.sealed, tc.tail)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSealDuringAsyncBegin: a seal (a later recovery) that comes while an
// asynchronous begin's sync is held is a synced write after the begin in
// the WAL. Its answer names the begun epoch among the replaced ones and
// counts the record written in it; a crash before it finds the copy sealed
// at its old epoch, and a crash after it finds the copy at the begun epoch,
// sealed at the new fence, with the record (docs/failover.md, "The new
// owner's epoch begins before it is durable", "A new seal").
func TestSealDuringAsyncBegin(t *testing.T) {
	mem, fault, open, s, c := sealedBeforeBegin(t)
	fault.on.Store(true)
	durable, err := c.BeginEpochAsync(2)
	if err != nil {
		t.Fatal(err)
	}
	<-fault.held
	appended := make(chan error, 1)
	go func() {
		_, err := c.Append(context.Background(), payloads("b", 0, 1))
		appended <- err
	}()
	for dl := time.Now().Add(5 * time.Second); c.Tails().RecordWritten != 4 && time.Now().Before(dl); {
		time.Sleep(time.Millisecond)
	}
	if got := c.Tails(); got.RecordWritten != 4 || got.Record != 3 {
		t.Fatalf("tails with the begin's sync held: %+v, want 4 written and 3 durable", got)
	}
	before := mem.CrashClone(vfs.CrashCloneCfg{})

	sealed := make(chan SealState, 1)
	go func() {
		st, err := c.Seal(3, 1)
		if err != nil {
			t.Error(err)
		}
		sealed <- st
	}()
	// Let the seal queue behind the held sync (were it later, it would
	// still come after the begin in the WAL: the checks hold either way).
	time.Sleep(50 * time.Millisecond)
	close(fault.release)
	st := <-sealed
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	<-durable
	if n := len(st.Seal.Replaced); st.Tails.Record != 4 || n == 0 || st.Seal.Replaced[n-1].Epoch != 2 {
		t.Fatalf("seal during the pending begin: %+v, want tail 4 and epoch 2 replaced last", st)
	}
	after := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()

	for _, tc := range []struct {
		name               string
		fs                 vfs.FS
		epoch, fence, tail uint64
	}{
		{"crash before the seal", before, 1, 2, 3},
		{"crash after the seal", after, 2, 3, 4},
	} {
		s := open(tc.fs)
		c := s.Get("s")
		seal, ok := c.SealInfo()
		if c.Epoch() != tc.epoch || !ok || seal.FenceEpoch != tc.fence || c.Tails().Record != tc.tail {
			t.Errorf("%s: epoch %d sealed %v %+v tail %d, want epoch %d sealed at %d tail %d",
				tc.name, c.Epoch(), ok, seal, c.Tails().Record, tc.epoch, tc.fence, tc.tail)
		}
		_ = s.Close()
	}
}

// sealedBeforeBegin opens a store on a crashable in-memory file system
// whose WAL syncs fault holds once on (and lets through once released),
// with copy "s" at epoch 1 holding records 0 to 2, sealed at fence 2.
// open opens a store at the same directory on another file system (a
// crash clone of mem).
func sealedBeforeBegin(t *testing.T) (*vfs.MemFS, *walFault, func(vfs.FS) *Store, *Store, *Copy) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	fault := &walFault{
		kinds:   []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
		held:    make(chan struct{}, 1),
		release: make(chan struct{}),
	}
	open := func(fs vfs.FS) *Store {
		t.Helper()
		s, err := Open(Options{Dir: "/db", FS: fs, Logger: quietLogger(), CursorSyncInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(errorfs.Wrap(mem, fault))
	c := mustCreate(t, s, "s", 1)
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("a", 0, 3))
	if _, err := c.Seal(2, 1); err != nil {
		t.Fatal(err)
	}
	return mem, fault, open, s, c
}
