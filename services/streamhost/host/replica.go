package host

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// replica is the runtime state of this host's copy of one stream: which
// role it plays. Role changes, seals and applies of one stream are
// serialized by mu; readers that must not wait (heartbeats, retention) read
// the atomic status instead.
type replica struct {
	h      *Host
	stream string

	mu  sync.Mutex
	own *owner    // set while the copy is the owner
	fol *follower // set while the copy is a follower
	// sealed is the confirmed bound of the owner role the last seal
	// stopped (seal.go); guarded by mu.
	sealed sealedBound
	// pre is the duplicate window the last seal began to build from the
	// sealed log, for a promotion to take (window.go); guarded by mu.
	pre *prebuilt
	// win is the copy's duplicate window across roles, lent to the role
	// that runs (window.go); guarded by mu while no role runs.
	win *copyWindow
	// begun is the copy and epoch this process last began (release):
	// after a crash, an owner at an epoch this process did not begin was
	// the crashed process's, and is sealed rather than served
	// (fenceEarlierOwner); guarded by mu.
	begun begunEpoch
	// noticed is the version of the latest recovery notice whose
	// assignment was applied to this copy before its pull (applyNoticed):
	// an assignment from a snapshot older than it, pulled before the
	// notice came, is not applied (it would end the role just taken);
	// guarded by mu.
	noticed uint64
	// arrivals are when the copy last applied records as a follower (an
	// owner role that stops counts as two arrivals now: the stream may be
	// busy), for the next follower role (startFollower); guarded by mu.
	arrivals recordArrivals

	status atomic.Pointer[roleStatus]
}

// begunEpoch names an epoch begun on one copy (a copy deleted and created
// again under the same name is another).
type begunEpoch struct {
	c     *streamlog.Copy
	epoch uint64
}

// roleStatus is an immutable view of a replica's role.
type roleStatus struct {
	role      string
	epoch     uint64
	streamID  uint64
	retention wire.Retention
	own       *owner
	fol       *follower
}

// publishStatus refreshes the atomic view; call with mu held.
func (r *replica) publishStatus(ret wire.Retention) {
	st := &roleStatus{role: wire.RoleNone, retention: ret, own: r.own, fol: r.fol}
	switch {
	case r.own != nil:
		st.role, st.epoch, st.streamID = wire.RoleOwner, r.own.epoch, r.own.id
	case r.fol != nil:
		st.role, st.epoch, st.streamID = wire.RoleFollower, r.fol.epoch, r.fol.id
	}
	r.status.Store(st)
	r.h.changed.mark(r.stream)
	r.h.retained.set(r, hasBound(ret) && st.role != wire.RoleNone)
}

// stopRole stops whatever role the copy plays; publishes waiting for a
// confirm fail with code. Call with mu held.
func (r *replica) stopRole(code string) { r.stopRoleAt(code, slog.LevelInfo) }

// stopRoleAt is stopRole logging at level; it returns the role it
// stopped ("" for none).
func (r *replica) stopRoleAt(code string, level slog.Level) (stopped string) {
	if r.own == nil && r.fol == nil {
		return ""
	}
	ret := r.status.Load().retention
	if r.own != nil {
		r.own.stop(code)
		r.win = r.own.window()
		now := time.Now()
		r.arrivals = recordArrivals{last: now, prev: now}
		r.h.log.Log(context.Background(), level, "owner role stopped", "stream", r.stream, "epoch", r.own.epoch, "reason", code)
		r.own, stopped = nil, wire.RoleOwner
	}
	if r.fol != nil {
		r.fol.stop()
		r.arrivals = r.fol.arrivals // the worker has returned
		r.h.log.Log(context.Background(), level, "follower role stopped", "stream", r.stream, "epoch", r.fol.epoch, "reason", code)
		r.fol, stopped = nil, wire.RoleFollower
	}
	r.publishStatus(ret)
	r.h.requestBeat()
	return stopped
}

// hasBound reports whether a retention bounds anything.
func hasBound(ret wire.Retention) bool {
	return ret.MaxRecords > 0 || ret.MaxBytes > 0 || ret.MaxAgeMS > 0
}
