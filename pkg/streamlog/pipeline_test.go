package streamlog

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncGateFS holds the WAL's syncs while armed: the first sync after
// arming signals entered and waits for release.
type syncGateFS struct {
	vfs.FS
	armed    atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	enteredO sync.Once
}

func (fs *syncGateFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &syncGateFile{File: f, fs: fs}, nil
}

func (fs *syncGateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *syncGateFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

type syncGateFile struct {
	vfs.File
	fs *syncGateFS
}

func (f *syncGateFile) gate() {
	if f.fs.armed.Load() {
		f.fs.enteredO.Do(func() { close(f.fs.entered) })
		<-f.fs.release
	}
}

func (f *syncGateFile) Sync() error     { f.gate(); return f.File.Sync() }
func (f *syncGateFile) SyncData() error { f.gate(); return f.File.SyncData() }

// TestNextGroupAppliedDuringFsync: while a group's WAL fsync is held, the
// committer applies the next group behind it (it does not wait for the
// first to be answered), and the second group is answered only after the
// first, each copy's tail moving in order.
func TestNextGroupAppliedDuringFsync(t *testing.T) {
	fs := &syncGateFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	var applies atomic.Int32
	s, err := openWith(Options{Dir: t.TempDir(), Logger: quietLogger(), CursorSyncInterval: time.Hour, FS: fs},
		func(s *impl) { s.beforeCommit = func() { applies.Add(1) } })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var released sync.Once
	releaseSync := func() {
		released.Do(func() {
			fs.armed.Store(false)
			close(fs.release)
		})
	}
	t.Cleanup(releaseSync) // runs before Close: a failed test does not hang on the held fsync
	c := mustCreate(t, s, "s", 1)
	ctx := context.Background()

	fs.armed.Store(true)
	before := applies.Load()
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Append(ctx, payloads("first", 0, 2))
		firstDone <- err
	}()
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group's fsync was never reached")
	}
	secondDone := make(chan error, 1)
	go func() {
		_, err := c.Append(ctx, payloads("second", 0, 3))
		secondDone <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for applies.Load() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d groups applied while the first one's fsync was held, want 2", applies.Load()-before)
		}
		time.Sleep(time.Millisecond) // waiting for the committer, not an assertion
	}
	select {
	case err := <-secondDone:
		t.Fatalf("the second append was answered (%v) before the first group's fsync ended", err)
	case err := <-firstDone:
		t.Fatalf("the first append was answered (%v) before its fsync ended", err)
	default:
	}
	if tl := c.Tails(); tl.Record != 0 {
		t.Fatalf("durable tail %d while the first fsync is held, want 0", tl.Record)
	}
	releaseSync()
	for i, ch := range []chan error{firstDone, secondDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d not answered after the fsync was released", i)
		}
	}
	if tl := c.Tails(); tl.Record != 5 {
		t.Fatalf("durable tail %d, want 5", tl.Record)
	}
	got := dataOf(readAll(t, c))
	want := append(payloads("first", 0, 2), payloads("second", 0, 3)...)
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("record %d is %q, want %q", i, got[i], want[i])
		}
	}
}
