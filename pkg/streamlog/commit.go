package streamlog

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// kv is one Set in a request.
type kv struct{ k, v []byte }

// request is one caller's share of a group commit. The caller encodes its
// keys and values (and assigns offsets) while holding its copy's lock and
// enqueues in that same critical section, so the queue holds each copy's
// requests in offset order; the committer writes whole groups of requests
// in one synced batch, and completeLoop publishes the new tails in queue
// order once the batch is durable.
type request struct {
	c    *copyImpl // nil for a bare sync (SyncCursors)
	kvs  []kv
	size int
	// vals are the request's records, each its entry in its batch's
	// value (batch.go): written records are served from them.
	vals [][]byte

	// What becomes durable when the request commits.
	recs                      bool
	recEnd, recDigest, recCum uint64
	evs                       bool
	evEnd                     uint64
	snap                      bool // the request writes a cursor snapshot at evEnd
	// announced: its records were signalled when written (appendWritten),
	// so their group commit need not wake WrittenChanged's waiters again.
	announced bool

	done chan error // buffered: completeLoop never blocks on a caller that gave up
}

// memEntryOverhead is what Pebble's memtable charges a batch entry beyond
// its key and value (arenaskl.MaxNodeSize): a skiplist node of the
// largest height (184 bytes), the key's 8-byte trailer and up to 3 bytes
// of alignment, 195 in all, rounded up.
const memEntryOverhead = 200

// memCost is what r's entries weigh in a memtable, as Pebble counts a
// batch against its large batch threshold: small records weigh several
// times their bytes.
func (r *request) memCost() int { return r.size + memEntryOverhead*len(r.kvs) }

// commitStats count group commits, for benchmarks and tests.
type commitStats struct {
	groups   atomic.Uint64
	requests atomic.Uint64
}

func (s *impl) enqueue(r *request) error {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.stopping {
		return ErrClosed
	}
	s.queue = append(s.queue, r)
	s.kickLocked()
	return nil
}

// kickLocked wakes the committer; the channel holds at most one wake-up.
func (s *impl) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// wait waits for r's group to commit. If ctx ends first the caller gets an
// error, but the write may still become durable: the outcome is unknown,
// as it is for any write whose reply was lost.
func (s *impl) wait(ctx context.Context, r *request) error {
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("streamlog: stopped waiting for the group commit, the write may still land: %w", ctx.Err())
	}
}

// defaultHoldMax bounds how long the committer holds a group back waiting
// for the callers of the previous group to come back (see takeGroup). It is
// of the order of one fsync on an SSD: holding longer than an fsync would
// cost more than the fsync it saves.
const defaultHoldMax = 300 * time.Microsecond

// commitLoop is the committer: it takes the queued requests (up to
// maxGroupBytes of memtable weight) and applies them as one batch
// committed with pebble.Sync, without waiting for the WAL's fsync
// (pebble's ApplyNoSyncWait), then hands the group to completeLoop, which
// waits for the fsync and answers the group. Groups are answered in the
// order they were applied, which is queue order.
//
// While a group's fsync runs, the committer may apply the next group
// behind it (takeGroup says when), whose WAL write Pebble then syncs as
// soon as that fsync ends: a group's write and memtable insert overlap
// the fsync before it instead of following it. At most two groups are
// handed off and not yet answered.
func (s *impl) commitLoop() {
	defer close(s.committed)
	applied := make(chan appliedGroup, 2)
	completed := make(chan struct{})
	p := &pipeline{answered: make(chan struct{}, 2)}
	go s.completeLoop(applied, p.answered, completed)
	defer func() {
		close(applied)
		<-completed
	}()
	for {
		group, size, ok := s.takeGroup(p)
		if !ok {
			return
		}
		applied <- s.applyGroup(group, size)
		p.pending = append(p.pending, len(group))
	}
}

// pipeline is the committer's view of the groups it handed to
// completeLoop: how many requests each of those not yet answered holds,
// oldest first, and how many the group answered last held.
type pipeline struct {
	answered chan struct{} // completeLoop answered the oldest pending group
	pending  []int
	hold     int
}

// heard notes that the oldest pending group was answered.
func (p *pipeline) heard() {
	p.hold, p.pending = p.pending[0], p.pending[1:]
}

// appliedGroup is a group the committer applied (b, nil on a failure to
// apply: err) for completeLoop to finish.
type appliedGroup struct {
	group []*request
	b     *pebble.Batch
	began time.Time
	err   error
}

// completeLoop finishes the applied groups in order: it waits for each
// one's fsync, answers it (finishGroup) and tells the committer on
// answered. It ends when applied is closed, and closes completed.
func (s *impl) completeLoop(applied <-chan appliedGroup, answered chan<- struct{}, completed chan<- struct{}) {
	defer close(completed)
	for a := range applied {
		s.finishGroup(a)
		answered <- struct{}{}
	}
}

// takeGroup waits for requests and takes a group of them.
//
// With no group in flight, it waits for as many requests as the group
// answered last had (p.hold), for at most holdMax: those callers usually
// come straight back with their next write, and without waiting for them
// the next fsync would carry only the first few to return, so closed-loop
// writers would split into cohorts taking turns at the disk.
//
// With one group in flight (its fsync running or about to), it takes a
// group to apply behind it only once as many requests are queued as that
// group has: writers that keep arriving (an owner's stream of client
// batches, a follower's of replicated ones) get the next fsync at once,
// while closed-loop writers, who come back only when answered, still
// share one fsync. With two in flight it waits for the older one.
func (s *impl) takeGroup(p *pipeline) ([]*request, int, bool) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	s.qmu.Lock()
	for {
		if len(s.queue) == 0 && s.stopping {
			s.qmu.Unlock()
			return nil, 0, false
		}
		if q := len(s.queue); q > 0 {
			if s.stopping && len(p.pending) < 2 {
				break
			}
			if len(p.pending) == 0 && q >= p.hold || len(p.pending) == 1 && q >= p.pending[0] {
				break
			}
		}
		var expired <-chan time.Time
		if len(s.queue) > 0 && len(p.pending) == 0 {
			if timer == nil {
				timer = time.NewTimer(s.holdMax)
			}
			expired = timer.C
		}
		s.qmu.Unlock()
		select {
		case <-s.kick:
		case <-p.answered:
			p.heard()
		case <-expired:
			p.hold = 0
		}
		s.qmu.Lock()
	}
	n, size, cost := 0, 0, 0
	for ; n < len(s.queue); n++ {
		r := s.queue[n]
		if n > 0 && cost+r.memCost() > maxGroupBytes {
			break
		}
		size += r.size
		cost += r.memCost()
	}
	group := s.queue[:n:n]
	if n == len(s.queue) {
		s.queue = nil
	} else {
		s.queue = append([]*request(nil), s.queue[n:]...)
	}
	s.qmu.Unlock()
	return group, size, true
}

// applyGroup writes a group's requests in one batch committed with
// pebble.Sync and returns once Pebble applied it, before its fsync.
func (s *impl) applyGroup(group []*request, size int) appliedGroup {
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	a := appliedGroup{group: group, began: time.Now()}
	if a.err = s.failure(); a.err != nil {
		return a
	}
	b := s.db.NewBatchWithSize(size + 64)
	for _, r := range group {
		for _, e := range r.kvs {
			_ = b.Set(e.k, e.v, nil)
		}
	}
	if b.Empty() {
		// Only bare syncs: an empty batch would not reach the WAL, and
		// a synced one makes every earlier WAL entry durable.
		_ = b.LogData(nil, nil)
	}
	if a.err = s.guard(func() error { return s.db.ApplyNoSyncWait(b, pebble.Sync) }); a.err != nil {
		_ = b.Close()
		return a
	}
	a.b = b
	return a
}

// finishGroup waits for an applied group's fsync and answers the group.
func (s *impl) finishGroup(a appliedGroup) {
	err := a.err
	if a.b != nil {
		err = s.guard(a.b.SyncWait)
		if err == nil {
			// If the group before this one failed after this one was
			// applied, this one fails too: Pebble fails every later sync
			// of a WAL whose write or sync failed, but the store does not
			// count on it to keep tails from passing the lost records.
			err = s.failure()
		}
		took := time.Since(a.began)
		_ = a.b.Close()
		s.stats.groups.Add(1)
		s.stats.requests.Add(uint64(len(a.group)))
		if err == nil && s.onGroupCommit != nil {
			s.onGroupCommit(len(a.group), took)
		}
	}
	if err != nil {
		err = fmt.Errorf("streamlog: group commit: %w", err)
	}
	s.completeGroup(a.group, err)
}

// completeGroup publishes a committed group's tails, in queue order, so
// durable tails only move forward and never past a hole, and wakes each
// touched copy's waiters once.
func (s *impl) completeGroup(group []*request, err error) {
	var touched []*copyImpl
	for _, r := range group {
		c := r.c
		if c == nil {
			continue
		}
		c.mu.Lock()
		if r.recs {
			c.dropWrittenLocked(r)
		}
		if err == nil {
			if r.recs {
				if r.recEnd != c.tail {
					c.prevTail, c.prevDigest, c.prevOK = c.tail, c.tailDigest, true
				}
				c.tail, c.tailDigest, c.tailCum = r.recEnd, r.recDigest, r.recCum
			}
			if r.evs {
				// The batch was synced, so every event below evEnd is
				// durable, including owner events written earlier without
				// fsync.
				c.cWritten, c.cDurable = r.evEnd, r.evEnd
				if r.snap {
					c.snapBoundary = r.evEnd
				}
			}
		}
		// Signal on failure too: exclusive operations waiting for
		// in-flight writes must wake up and see the failure. Records
		// made durable alone wake only Changed's waiters: those of
		// WrittenChanged saw them when they were written.
		if !c.signalPending {
			c.signalPending = true
			touched = append(touched, c)
		}
		if err != nil || r.evs || !r.recs || !r.announced {
			c.signalAll = true
		}
		c.mu.Unlock()
	}
	for _, c := range touched {
		c.mu.Lock()
		c.signalPending = false
		if c.signalAll {
			c.signalAll = false
			c.signalLocked()
		} else {
			c.signalDurableLocked()
		}
		c.mu.Unlock()
	}
	for _, r := range group {
		r.done <- err
	}
}

// syncCursorsOf makes the cursor events written so far on each copy
// durable with one synced commit, a bare request in the next group taken.
func (s *impl) syncCursorsOf(ctx context.Context, cs []*copyImpl) error {
	type mark struct {
		c       *copyImpl
		written uint64
		gen     uint64
	}
	var marks []mark
	for _, c := range cs {
		c.mu.Lock()
		if !c.deleted && c.cDurable < c.cWritten {
			marks = append(marks, mark{c, c.cWritten, c.cgen})
		}
		c.mu.Unlock()
	}
	if len(marks) == 0 {
		return nil
	}
	r := &request{done: make(chan error, 1)}
	if err := s.enqueue(r); err != nil {
		return err
	}
	if err := s.wait(ctx, r); err != nil {
		return err
	}
	for _, m := range marks {
		m.c.mu.Lock()
		// A cut or reset in between renumbered the cursor log: what was
		// synced no longer says anything about the offsets now written.
		if m.c.cgen == m.gen && m.c.cDurable < m.written {
			m.c.cDurable = m.written
			m.c.signalLocked()
		}
		m.c.mu.Unlock()
	}
	return nil
}
