package streamlog

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// walFault injects errorfs.ErrInjected into the given operations on the
// WAL (*.log) once it is switched on; with release set it holds them
// instead (each signalled on held, if it has room) until release is
// closed, and then lets them succeed.
type walFault struct {
	on      atomic.Bool
	kinds   []errorfs.OpKind
	hits    atomic.Int64
	held    chan struct{}
	release chan struct{}
}

func (f *walFault) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	for _, k := range f.kinds {
		if op.Kind != k {
			continue
		}
		f.hits.Add(1)
		if f.release == nil {
			return errorfs.ErrInjected
		}
		select {
		case f.held <- struct{}{}:
		default:
		}
		<-f.release
		return nil
	}
	return nil
}

func (f *walFault) String() string { return "wal fault" }

// TestFailStop: a WAL write error and a WAL sync error during Append each
// break the store for good. The Append fails, and every later operation
// (Append, Apply, Seal, Create, Read) fails at once with the latched
// error, even once the file system is healthy again; the durable tail
// stays where it was before the error; Failure reports the error and
// OnFailure is called once; Close returns. Reopened on a healthy file
// system, the store holds every record it confirmed before the error.
func TestFailStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fault := &walFault{kinds: tc.kinds}
			failures := make(chan error, 4)
			s, err := Open(Options{
				Dir: dir, Logger: quietLogger(), CursorSyncInterval: time.Hour,
				FS:        errorfs.Wrap(vfs.Default, fault),
				OnFailure: func(err error) { failures <- err },
			})
			if err != nil {
				t.Fatal(err)
			}
			c := mustCreate(t, s, "s", 1)
			ctx := context.Background()
			before := payloads("ok", 0, 50)
			for i := 0; i < len(before); i += 10 {
				mustAppend(t, c, before[i:i+10])
			}
			if got := c.Tails().Record; got != 50 {
				t.Fatalf("tail before the fault: %d", got)
			}
			if s.Failure() != nil {
				t.Fatalf("failure before the fault: %v", s.Failure())
			}

			fault.on.Store(true)
			if _, err := c.Append(ctx, payloads("lost", 0, 5)); err == nil {
				t.Fatal("append succeeded with the WAL failing")
			}
			if fault.hits.Load() == 0 {
				t.Fatal("the fault was never hit")
			}
			latched := s.Failure()
			if latched == nil {
				t.Fatal("Failure is nil after a failed append")
			}
			select {
			case err := <-failures:
				if err != latched {
					t.Fatalf("OnFailure got %v, Failure is %v", err, latched)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("OnFailure was not called")
			}
			// The file system is healthy again, but the store stays failed:
			// a later sync cannot vouch for what the failed one dropped.
			fault.on.Store(false)
			if _, err := c.Append(ctx, payloads("later", 0, 1)); err == nil || !errors.Is(err, latched) {
				t.Fatalf("append after the failure: %v, want the latched %v", err, latched)
			}
			if err := c.Apply(ctx, []Record{{Offset: 50, Data: []byte("x")}}); err == nil {
				t.Fatal("apply after the failure succeeded")
			}
			if _, err := c.Seal(c.Epoch()+1, 1); err == nil {
				t.Fatal("seal after the failure succeeded")
			}
			if _, err := s.Create("t", 2, c.meta.Retention); err == nil {
				t.Fatal("create after the failure succeeded")
			}
			if got := c.Tails().Record; got != 50 {
				t.Fatalf("tail after the failure: %d, want 50", got)
			}
			select {
			case err := <-failures:
				t.Fatalf("OnFailure called again: %v", err)
			default:
			}
			// Reads are refused too: the host serves nothing from a failed
			// store, its streams fail over.
			if _, err := c.Read(0, 10, 0, 50); !errors.Is(err, latched) {
				t.Fatalf("read after the failure: %v, want the latched error", err)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				t.Logf("close of the failed store: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs on a failed store")
			}

			s2 := openTest(t, dir, nil)
			c2 := s2.Get("s")
			if c2 == nil {
				t.Fatal("copy gone after reopen")
			}
			recs := readAll(t, c2)
			if len(recs) < 50 {
				t.Fatalf("reopened copy holds %d records, fewer than the 50 confirmed", len(recs))
			}
			for i, want := range before {
				if recs[i].Offset != uint64(i) || !bytes.Equal(recs[i].Data, want) {
					t.Fatalf("record %d after reopen: %d %q, want %q", i, recs[i].Offset, recs[i].Data, want)
				}
			}
		})
	}
}
