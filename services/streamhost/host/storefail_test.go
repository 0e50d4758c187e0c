package host

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// walFault fails the given operations on the WAL (*.log) once switched on.
type walFault struct {
	on    atomic.Bool
	kinds []errorfs.OpKind
}

func (f *walFault) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	for _, k := range f.kinds {
		if op.Kind == k {
			return errorfs.ErrInjected
		}
	}
	return nil
}

func (f *walFault) String() string { return "wal fault" }

// waitHeartbeat waits until node's heartbeat satisfies pred.
func (c *miniCluster) waitHeartbeat(node, what string, pred func(wire.Heartbeat) bool) wire.Heartbeat {
	c.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		hb, ok := c.hbs[node]
		ch := c.changed
		c.mu.Unlock()
		if ok && pred(hb) {
			return hb
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.t.Fatalf("timed out waiting for %s's heartbeat: %s (last %+v)", node, what, hb)
		}
	}
}

// TestStoreFailureStopsPretending: the owner's store fails under a publish
// (a WAL write error, then in a second run a WAL sync error). The publish
// that met the error (answered unavailable, which clients retry) and every
// later one are not confirmed, although the
// follower is healthy and the disk works again; the host's heartbeat says
// leaving with the error, its copy holds no role any more, and Ready and
// StoreFailure report it (/healthz answers 503 with it); its log names the
// error. Everything confirmed before the error stays readable at the
// follower.
func TestStoreFailureStopsPretending(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const stream, id = "disk", 7
			fault := &walFault{kinds: tc.kinds}
			c := newMiniCluster(t)
			c.assign(assignment(stream, id, 1, "n1", []string{"n2"}))
			n1 := c.start("n1", func(cfg *Config) { cfg.StoreFS = errorfs.Wrap(vfs.Default, fault) })
			c.start("n2", nil)
			c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
			c.waitCopy("n2", stream, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
			const before = 20
			for i := range before {
				if pc := c.mustPublish(stream, payload(i)); pc.Offset != uint64(i) || pc.Copies != 2 {
					t.Fatalf("publish %d: %+v", i, pc)
				}
			}
			if !n1.h.Ready() || n1.h.StoreFailure() != nil {
				t.Fatalf("before the fault: ready %v, failure %v", n1.h.Ready(), n1.h.StoreFailure())
			}

			fault.on.Store(true)
			if pc, e := c.publish(stream, payload(before), "", 0); e == nil {
				t.Fatalf("publish confirmed at %d with the owner's WAL failing", pc.Offset)
			} else if e.Code != wire.CodeUnavailable {
				// Retryable: the client takes it to the new owner.
				t.Fatalf("publish at the fault answered %v, want unavailable", e)
			}
			fault.on.Store(false)
			for i := before + 1; i < before+5; i++ {
				if pc, e := c.publish(stream, payload(i), "", 0); e == nil {
					t.Fatalf("publish confirmed at %d after the owner's store failed", pc.Offset)
				}
			}

			hb := c.waitHeartbeat("n1", "leaving with the store error", func(hb wire.Heartbeat) bool {
				return hb.Leaving && hb.StoreError != ""
			})
			if !strings.Contains(hb.StoreError, "injected error") {
				t.Fatalf("heartbeat store error %q does not name the error", hb.StoreError)
			}
			for _, cs := range hb.Copies {
				if cs.Stream == stream && (cs.Role != wire.RoleNone || cs.RecordTail > before) {
					t.Fatalf("failed host still reports its copy as %+v", cs)
				}
			}
			if n1.h.Ready() {
				t.Fatal("Ready with a failed store")
			}
			if err := n1.h.StoreFailure(); err == nil || !strings.Contains(err.Error(), "injected error") {
				t.Fatalf("StoreFailure = %v", err)
			}
			n1.log.waitFor(t, "store failed")

			// What was confirmed before the error is at the follower.
			fol := c.waitCopy("n2", stream, "holding the confirmed records", func(cs wire.CopyStatus) bool { return cs.RecordTail >= before })
			if fol.RecordTail > before+1 {
				t.Fatalf("follower holds %d records; at most %d were ever written by the owner", fol.RecordTail, before+1)
			}
		})
	}
}
