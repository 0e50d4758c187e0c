package streamlog

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

// commitSync commits b durably; a failure breaks the store (see
// impl.failed).
func (s *impl) commitSync(b *pebble.Batch) error {
	return s.guard(func() error { return b.Commit(pebble.Sync) })
}

func (c *copyImpl) sealStateLocked() SealState {
	m := c.meta.clone()
	st := SealState{
		Tails:     c.tailsLocked(),
		LogEpochs: m.LogEpochs,
		Digest:    formatDigest(c.tailDigest),
	}
	if m.Sealed {
		st.Seal = m.Seal
	}
	return st
}

func (c *copyImpl) seal(fence, transition uint64) (SealState, error) {
	if err := c.s.enter(); err != nil {
		return SealState{}, err
	}
	defer c.s.leave()
	var st SealState
	err := c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		written := c.cWritten
		if m.Sealed && fence == m.Seal.FenceEpoch && transition == m.Seal.Transition &&
			written == c.cDurable && c.next == c.tail {
			// The same seal again (a recovery round retried after a
			// timeout seals every copy anew), with nothing written since:
			// the seal and everything it reports are durable already.
			st = c.sealStateLocked()
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		epoch := lastEpoch(m.LogEpochs)
		switch {
		case fence <= epoch:
			// A seal at fence f stops the history of epoch f-1 so that a
			// recovery can choose among the copies. A copy that has begun
			// epoch f (or later) already follows the history the recovery
			// chose: a late or repeated seal at f must not stop it, or it
			// would seal a live copy of the current epoch.
			return fmt.Errorf("fence %d is not above the copy's epoch %d: %w", fence, epoch, ErrStaleFence)
		case m.Sealed && fence < m.Seal.FenceEpoch:
			return fmt.Errorf("fence %d is below the seal's fence %d: %w", fence, m.Seal.FenceEpoch, ErrStaleFence)
		case m.Sealed && fence == m.Seal.FenceEpoch && transition < m.Seal.Transition:
			return fmt.Errorf("transition %d at fence %d is older than the seal's %d: %w", transition, fence, m.Seal.Transition, ErrStaleFence)
		case m.Sealed && fence == m.Seal.FenceEpoch:
			// A newer transition at the same fence takes the seal over
			// (a withdrawn recovery replaced by a new one).
			m.Seal.Transition = transition
		case m.Sealed:
			// A higher fence: the copy still follows the history it
			// followed when first sealed, since a seal adds no log epoch.
			m.Seal.FenceEpoch, m.Seal.Transition = fence, transition
		default:
			m.Sealed = true
			m.Seal = Seal{FenceEpoch: fence, Transition: transition, Replaced: slices.Clone(m.LogEpochs)}
		}
		// The synced commit also makes every cursor event written so far
		// durable, so the reported cursor tail is a durable one.
		return c.commitMeta(m, nil, func() {
			c.cDurable = written
			st = c.sealStateLocked()
		})
	})
	if err != nil {
		return SealState{}, fmt.Errorf("streamlog: seal %s at %d/%d: %w", c.name, fence, transition, err)
	}
	return st, nil
}

// ownEpoch is the epoch of the owner history the copy's log follows: its
// last log epoch, or for a sealed copy the last of the epochs its seal
// replaced.
func ownEpoch(m meta) uint64 {
	if m.Sealed {
		return lastEpoch(m.Seal.Replaced)
	}
	return lastEpoch(m.LogEpochs)
}

func (c *copyImpl) beginEpoch(epoch uint64) error {
	_, err := c.beginEpochWith(epoch, false)
	return err
}

// closedCh is a closed channel: a begin that is durable already.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// beginEpochWith is BeginEpoch, or with async BeginEpochAsync: the batch
// is then applied without waiting for its WAL sync, and durable is closed
// by a goroutine of this call once the sync has ended (never, if it
// failed: the store has failed then). That goroutine holds the store open
// (enter/leave) until the sync ends, and is the only one per begin.
func (c *copyImpl) beginEpochWith(epoch uint64, async bool) (durable <-chan struct{}, err error) {
	if err := c.s.enter(); err != nil {
		return nil, err
	}
	left := false
	defer func() {
		if !left {
			c.s.leave()
		}
	}()
	durable = closedCh
	err = c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		tail, written := c.tail, c.cWritten
		state := maps.Clone(c.cursors)
		c.mu.Unlock()
		changed := false
		if m.Sealed {
			if epoch < m.Seal.FenceEpoch {
				return fmt.Errorf("epoch %d is below the seal's fence %d: %w", epoch, m.Seal.FenceEpoch, ErrStaleFence)
			}
			m.Sealed, m.Seal = false, Seal{}
			changed = true
		} else if own := lastEpoch(m.LogEpochs); epoch < own {
			return fmt.Errorf("epoch %d is below the copy's epoch %d: %w", epoch, own, ErrStaleFence)
		}
		if epoch > lastEpoch(m.LogEpochs) {
			m.LogEpochs = append(m.LogEpochs, wire.LogEpoch{Epoch: epoch, RecordStart: tail, CursorStart: written})
			changed = true
		}
		// A promoted follower may hold cursor events past its own record
		// tail; clamp them before it serves, or a reader would skip the
		// records the new owner writes there.
		clamped := clampCursors(state, tail)
		if !changed && !clamped {
			c.mu.Lock()
			pending := c.beginDurable
			c.mu.Unlock()
			if pending == nil || isClosed(pending) {
				return nil
			}
			if async {
				durable = pending // an earlier async begin's sync still runs
				return nil
			}
			// A synchronous begin returns durable: the synced write
			// below makes the earlier async one durable too.
		}
		ops := func(b *pebble.Batch) {
			if clamped {
				_ = b.Set(snapshotKey(c.id), encodeSnapshot(written, state), nil)
			}
		}
		then := func() {
			if clamped {
				c.cursors = state
				c.snapBoundary, c.snapNext = written, written
			}
		}
		if !async {
			return c.commitMeta(m, ops, func() {
				// The synced commit also makes every cursor event written
				// so far durable.
				c.cDurable = written
				then()
			})
		}
		ch, err := c.commitMetaAsync(m, ops, then)
		if err != nil {
			return err
		}
		durable, left = ch, true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("streamlog: begin epoch %d on %s: %w", epoch, c.name, err)
	}
	return durable, nil
}

// commitMetaAsync is commitMeta without the wait for the WAL sync: the
// batch is in the WAL ahead of every later write of the store, and visible,
// when it returns, and the returned channel is closed once it is durable.
// It takes over the caller's enter: its goroutine leaves once the sync
// has ended. A failed sync fails the store (guard) and leaves the channel
// open.
func (c *copyImpl) commitMetaAsync(m meta, ops func(b *pebble.Batch), then func()) (<-chan struct{}, error) {
	b := c.metaBatch(m, ops)
	if err := c.s.guard(func() error { return c.s.db.ApplyNoSyncWait(b, pebble.Sync) }); err != nil {
		releaseBatch(b)
		return nil, err
	}
	ch := make(chan struct{})
	c.mu.Lock()
	c.beginDurable = ch
	c.installMetaLocked(m, then)
	c.mu.Unlock()
	go func() {
		defer c.s.leave()
		err := c.s.guard(b.SyncWait)
		releaseBatch(b)
		if err == nil {
			close(ch)
		}
	}()
	return ch, nil
}

// cutPoint returns where a copy at own epoch is cut for target: the
// lowest record tail and, independently, the lowest cursor event tail among
// the starts with own < epoch <= target. The two logs are cut apart because
// the starts' cursor tails need not rise with their record tails: a
// recovery promotes by record tail (the cursor tail only breaks ties) and an
// accepted loss records heartbeat tails, so a later start can hold fewer
// cursor events than an earlier one with a lower record tail, and each
// start's owner wrote its own cursor events above its own cursor tail.
func cutPoint(own, target uint64, starts []wire.HistoryStart) (recordTail, cursorTail uint64, ok bool) {
	for _, s := range starts {
		if s.Epoch <= own || s.Epoch > target {
			continue
		}
		if !ok {
			recordTail, cursorTail, ok = s.RecordTail, s.CursorTail, true
			continue
		}
		recordTail, cursorTail = min(recordTail, s.RecordTail), min(cursorTail, s.CursorTail)
	}
	return recordTail, cursorTail, ok
}

func (c *copyImpl) cutToHistory(target uint64, starts []wire.HistoryStart) (CutResult, error) {
	if err := c.s.enter(); err != nil {
		return CutResult{}, err
	}
	defer c.s.leave()
	var res CutResult
	err := c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		tail, tailDigest, tailCum := c.tail, c.tailDigest, c.tailCum
		written := c.cWritten
		c.mu.Unlock()
		res = CutResult{RecordTail: tail, CursorTail: written}
		cutRecord, cutCursor, ok := cutPoint(ownEpoch(m), target, starts)
		if !ok {
			return nil
		}
		// Never below the retained head (nor the start of the cursor log),
		// and never below the starts' own tails.
		newTail := min(tail, max(cutRecord, m.Head))
		newCTail := min(written, max(cutCursor, m.CursorStart))

		digest, cum := tailDigest, tailCum
		var kept kv // the batch holding newTail-1, cut to end there
		keep := false
		if newTail < tail {
			if newTail == m.Head {
				digest, cum = m.HeadDigest, m.HeadCum
			} else {
				rm, err := recordAt(c.s.db, c.id, newTail-1)
				if err != nil {
					return err
				}
				digest, cum = rm.digest, rm.cum
			}
			// A cut to the head keeps no record: the batch it falls in
			// goes whole, as retention would have removed what it kept.
			if newTail > m.Head {
				var err error
				if kept, keep, err = cutBatchAt(c.s.db, c.id, newTail); err != nil {
					return fmt.Errorf("cut the batch at %d: %w", newTail, err)
				}
			}
		}

		// The cursor fold at the cut: the persisted snapshot, with its
		// boundary lowered if it lies past the cut (its state is kept, the
		// new owner's events there replay over it), else plus the events
		// up to the cut.
		snap := snapshot{boundary: m.CursorStart, state: map[string]uint64{}}
		if sv, err := getValue(c.s.db, snapshotKey(c.id)); err != nil {
			return fmt.Errorf("read cursor snapshot: %w", err)
		} else if sv != nil {
			if snap, err = decodeSnapshot(sv); err != nil {
				return err
			}
		}
		lowered := false
		if snap.boundary > newCTail {
			snap.boundary, lowered = newCTail, true
		} else if _, err := foldEvents(c.s.db, c.id, snap.state, snap.boundary, newCTail); err != nil {
			return err
		}
		clamped := clampCursors(snap.state, newTail)
		if newTail == tail && newCTail == written && !lowered && !clamped {
			return nil
		}

		// Log epochs that began past the cut now cover an empty range. They
		// are kept (with their starts lowered to the cut) rather than
		// dropped, so the copy's own epoch does not move and repeating the
		// cut selects the same start.
		adjust := func(les []wire.LogEpoch) {
			for i := range les {
				les[i].RecordStart = min(les[i].RecordStart, newTail)
				les[i].CursorStart = min(les[i].CursorStart, newCTail)
			}
		}
		adjust(m.LogEpochs)
		adjust(m.Seal.Replaced)
		// A clamp alone leaves both logs as they were: the copy was on the
		// target history already.
		res = CutResult{Cut: newTail < tail || newCTail < written, RecordTail: newTail, CursorTail: newCTail, Removed: tail - newTail}
		return c.commitMeta(m, func(b *pebble.Batch) {
			if newTail < tail {
				_ = b.DeleteRange(batchKey(c.id, newTail), recordLogEnd(c.id), nil)
				if keep {
					// Keyed below the deleted range: the batch now ends at
					// newTail-1.
					_ = b.Set(kept.k, kept.v, nil)
				}
			}
			if newCTail < written {
				_ = b.DeleteRange(eventKey(c.id, newCTail), eventLogEnd(c.id), nil)
			}
			_ = b.Set(snapshotKey(c.id), encodeSnapshot(newCTail, snap.state), nil)
		}, func() {
			c.tail, c.tailDigest, c.tailCum = newTail, digest, cum
			c.next, c.nextDigest, c.nextCum = newTail, digest, cum
			c.prevOK = false
			c.cWritten, c.cDurable, c.cNext = newCTail, newCTail, newCTail
			c.cgen++
			c.cursors = snap.state
			c.snapBoundary, c.snapNext = newCTail, newCTail
		})
	})
	if err != nil {
		return CutResult{}, fmt.Errorf("streamlog: cut %s to the history of epoch %d: %w", c.name, target, err)
	}
	return res, nil
}

func (c *copyImpl) enforceRetention(now time.Time, keepFrom uint64) error {
	if err := c.s.enter(); err != nil {
		return err
	}
	defer c.s.leave()
	err := c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		tail, tailCum := c.tail, c.tailCum
		c.mu.Unlock()
		ret := m.Retention
		limit := min(keepFrom, tail)
		if limit <= m.Head {
			return nil
		}
		target := m.Head
		if ret.MaxRecords > 0 && tail-m.Head > ret.MaxRecords {
			target = min(tail-ret.MaxRecords, limit)
		}
		byBytes := ret.MaxBytes > 0 && tailCum-m.HeadCum > ret.MaxBytes
		byAge := ret.MaxAgeMS > 0
		head, hd, hc := m.Head, m.HeadDigest, m.HeadCum
		if byBytes || byAge {
			// Walk up from the head while a record must go; the walk reads
			// only what it removes (plus one record).
			cutoff := now.UnixNano() - ret.MaxAgeMS*int64(time.Millisecond)
			ri, err := newRecordIter(c.s.db, c.id)
			if err != nil {
				return fmt.Errorf("scan records: %w", err)
			}
			for ok := ri.seekGE(m.Head); ok && ri.off < limit; ok = ri.next() {
				off, rm := ri.off, ri.meta
				drop := off < target ||
					(byBytes && tailCum-hc > ret.MaxBytes) ||
					(byAge && rm.timeNS < cutoff)
				if off != head || !drop {
					break
				}
				head, hd, hc = off+1, rm.digest, rm.cum
			}
			if err := ri.close(); err != nil {
				return fmt.Errorf("scan records: %w", err)
			}
		} else if target > m.Head {
			rm, err := recordAt(c.s.db, c.id, target-1)
			if err != nil {
				return err
			}
			head, hd, hc = target, rm.digest, rm.cum
		}
		if head == m.Head {
			return nil
		}
		m.Head, m.HeadDigest, m.HeadCum = head, hd, hc
		return c.commitMeta(m, func(b *pebble.Batch) {
			// Every batch that ends below the new head (from 0: whatever
			// an earlier operation left below the old head goes too). The
			// one that holds the head stays whole: its records below the
			// head are never read again.
			_ = b.DeleteRange(batchKey(c.id, 0), batchKey(c.id, head), nil)
		}, nil)
	})
	if err != nil {
		return fmt.Errorf("streamlog: enforce retention on %s: %w", c.name, err)
	}
	return nil
}

func (c *copyImpl) setRetention(ret wire.Retention) error {
	if err := c.s.enter(); err != nil {
		return err
	}
	defer c.s.leave()
	err := c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		c.mu.Unlock()
		if m.Retention == ret {
			return nil
		}
		m.Retention = ret
		if err := c.s.guard(func() error { return c.s.db.Set(metaKey(c.id), encodeMeta(m), pebble.Sync) }); err != nil {
			return err
		}
		c.mu.Lock()
		c.meta = m
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("streamlog: set retention on %s: %w", c.name, err)
	}
	return nil
}

// resetTo empties the record log and restarts it at offset, with the
// running digest there set to digest (the owner's digest at offset, so that
// both chains go on agreeing). The cursor event log restarts at
// cursorOffset; if that is where it already ends, it is kept as it is (with
// its cursor positions), since a follower's events are a prefix of the
// owner's and the owner continues from there.
func (c *copyImpl) resetTo(offset, cursorOffset, digest uint64) error {
	if err := c.s.enter(); err != nil {
		return err
	}
	defer c.s.leave()
	err := c.exclusive(func() error {
		c.mu.Lock()
		m := c.meta.clone()
		keepCursors := cursorOffset == c.cWritten
		c.mu.Unlock()
		if m.Sealed {
			return fmt.Errorf("fenced at epoch %d: %w", m.Seal.FenceEpoch, ErrSealed)
		}
		m.Head, m.HeadDigest, m.HeadCum = offset, digest, 0
		if !keepCursors {
			m.CursorStart = cursorOffset
		}
		return c.commitMeta(m, func(b *pebble.Batch) {
			_ = b.DeleteRange(batchKey(c.id, 0), recordLogEnd(c.id), nil)
			if !keepCursors {
				_ = b.DeleteRange(eventKey(c.id, 0), eventLogEnd(c.id), nil)
				_ = b.Set(snapshotKey(c.id), encodeSnapshot(cursorOffset, nil), nil)
			}
		}, func() {
			c.tail, c.tailDigest, c.tailCum = offset, digest, 0
			c.next, c.nextDigest, c.nextCum = offset, digest, 0
			c.prevOK = false
			c.cDurable = c.cWritten
			if !keepCursors {
				c.cWritten, c.cDurable, c.cNext = cursorOffset, cursorOffset, cursorOffset
				c.cgen++
				c.cursors = map[string]uint64{}
				c.snapBoundary, c.snapNext = cursorOffset, cursorOffset
			}
		})
	})
	if err != nil {
		return fmt.Errorf("streamlog: reset %s to %d/%d (digest %s): %w", c.name, offset, cursorOffset, formatDigest(digest), err)
	}
	return nil
}

// commitMeta writes ops and the copy's new metadata m in one synced batch
// and, only once that is durable, installs m and runs then under c.mu
// before waking waiters, so the copy's state in memory never runs ahead of
// what is on disk. Callers hold the copy exclusively (see exclusive).
func (c *copyImpl) commitMeta(m meta, ops func(b *pebble.Batch), then func()) error {
	b := c.metaBatch(m, ops)
	defer releaseBatch(b)
	if err := c.s.commitSync(b); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.installMetaLocked(m, then)
	return nil
}

// metaBatch is a batch of ops and the copy's meta m (commitMeta,
// commitMetaAsync).
func (c *copyImpl) metaBatch(m meta, ops func(b *pebble.Batch)) *pebble.Batch {
	b := c.s.db.NewBatch()
	if ops != nil {
		ops(b)
	}
	_ = b.Set(metaKey(c.id), encodeMeta(m), nil)
	return b
}

// installMetaLocked makes m the copy's meta once its batch is written, runs
// then and wakes the copy's waiters; c.mu is held.
func (c *copyImpl) installMetaLocked(m meta, then func()) {
	c.meta = m
	if then != nil {
		then()
	}
	c.signalLocked()
}
