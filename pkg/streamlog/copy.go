package streamlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

// copyImpl is one copy's in-memory state. The logs themselves live only in
// Pebble; memory holds the tails, the metadata and the cursor fold (one
// position per cursor), so it does not grow with the logs.
type copyImpl struct {
	s    *impl
	id   uint64 // key prefix, assigned at create
	name string
	sid  uint64

	// opMu serializes exclusive operations (seal, epochs, cuts, retention,
	// reset, delete): each runs alone on the copy, see exclusive.
	opMu sync.Mutex

	mu   sync.Mutex
	meta meta
	// Durable record tail, with the running digest and byte count there.
	tail, tailDigest, tailCum uint64
	// prevTail and prevDigest are the durable record tail before the
	// copy's last write made durable moved it (its last request of a group
	// commit: with several in one group, the start of the last one), and
	// the digest there (valid while prevOK). A follower one write behind
	// asks for the digest at its read position with every replication
	// request, as after one record appended to an idle stream, and this
	// answers it from memory rather than with a read of the record before
	// it. A cut or reset clears it, as any operation that rewrites the
	// log must.
	prevTail, prevDigest uint64
	prevOK               bool
	// Pending record tail: tail plus records queued for a group commit.
	next, nextDigest, nextCum uint64
	// written holds the record requests queued for a group commit, in
	// offset order (covering [tail, next)): ReadWritten and DigestAt serve
	// written records from them before they are durable (written.go).
	written []*request
	// Cursor event tails: written (visible), durable (fsynced), and next
	// (written plus applied events queued for a group commit).
	cWritten, cDurable, cNext uint64
	// cgen changes whenever the cursor log is renumbered (cut, reset), so a
	// cursor sync started before cannot mark later events durable.
	cgen uint64
	// snapBoundary is the persisted cursor snapshot's boundary; snapNext
	// the boundary of the newest snapshot written or queued.
	snapBoundary, snapNext uint64
	// cursors is the fold of the snapshot and the events above it.
	cursors map[string]uint64
	// beginDurable is closed once the copy's last BeginEpochAsync is
	// durable (nil if there was none).
	beginDurable <-chan struct{}
	// gate is non-nil while an exclusive operation runs; writers wait for
	// it to close.
	gate      chan struct{}
	changedCh chan struct{}
	// writtenCh is changedCh less the changes that only make written
	// records durable (WrittenChanged).
	writtenCh chan struct{}
	deleted   bool
	// signalPending is set while the completer has this copy on its list
	// of copies to wake; signalAll when that wake-up is more than the
	// record tail reaching records already written (signalLocked, not
	// signalDurableLocked).
	signalPending, signalAll bool
}

func newCopy(s *impl, id uint64, m meta, cursorTail uint64) *Copy {
	c := &Copy{}
	c.s = s
	c.id = id
	c.name = m.Stream
	c.sid = m.StreamID
	c.meta = m
	c.tail, c.next = m.Head, m.Head
	c.tailDigest, c.nextDigest = m.HeadDigest, m.HeadDigest
	c.tailCum, c.nextCum = m.HeadCum, m.HeadCum
	c.cWritten, c.cDurable, c.cNext = cursorTail, cursorTail, cursorTail
	c.snapBoundary, c.snapNext = cursorTail, cursorTail
	c.cursors = make(map[string]uint64)
	c.changedCh = make(chan struct{})
	c.writtenCh = make(chan struct{})
	return c
}

// loadCopy rebuilds a copy's state on Open: the record tail comes down to
// the record log end, the cursor fold is the snapshot plus the events above
// its boundary, and cursors above the record tail are clamped to it.
func (s *impl) loadCopy(name string, id uint64) (*Copy, error) {
	mv, err := getValue(s.db, metaKey(id))
	if err != nil {
		return nil, fmt.Errorf("streamlog: load %s: read meta: %w", name, err)
	}
	if mv == nil {
		return nil, fmt.Errorf("streamlog: load %s: copy %d has no meta", name, id)
	}
	m, err := decodeMeta(mv)
	if err != nil {
		return nil, fmt.Errorf("streamlog: load %s: %w", name, err)
	}
	snap := snapshot{boundary: m.CursorStart, state: map[string]uint64{}}
	if sv, err := getValue(s.db, snapshotKey(id)); err != nil {
		return nil, fmt.Errorf("streamlog: load %s: read cursor snapshot: %w", name, err)
	} else if sv != nil {
		if snap, err = decodeSnapshot(sv); err != nil {
			return nil, fmt.Errorf("streamlog: load %s: %w", name, err)
		}
	}
	c := newCopy(s, id, m, 0)

	last, rm, ok, err := lastRecord(s.db, id)
	if err != nil {
		return nil, fmt.Errorf("streamlog: load %s: %w", name, err)
	}
	if ok && last >= m.Head {
		c.tail, c.tailDigest, c.tailCum = last+1, rm.digest, rm.cum
		c.next, c.nextDigest, c.nextCum = c.tail, c.tailDigest, c.tailCum
	}

	ctail, err := foldEvents(s.db, id, snap.state, snap.boundary, ^uint64(0))
	if err != nil {
		return nil, fmt.Errorf("streamlog: load %s: %w", name, err)
	}
	ctail = max(ctail, m.CursorStart)
	c.cWritten, c.cDurable, c.cNext = ctail, ctail, ctail
	c.snapBoundary, c.snapNext = snap.boundary, snap.boundary
	c.cursors = snap.state
	if clampCursors(c.cursors, c.tail) {
		// Persist the clamp: once the log grows again past the old
		// position, an unclamped cursor would skip records it never read.
		if err := s.guard(func() error { return s.db.Set(snapshotKey(id), encodeSnapshot(ctail, c.cursors), pebble.Sync) }); err != nil {
			return nil, fmt.Errorf("streamlog: load %s: write clamped cursor snapshot: %w", name, err)
		}
		c.snapBoundary, c.snapNext = ctail, ctail
	}
	return c, nil
}

// lastRecord returns the copy's highest stored record offset and meta.
func lastRecord(db *pebble.DB, id uint64) (_ uint64, _ recordMeta, _ bool, err error) {
	ri, err := newRecordIter(db, id)
	if err != nil {
		return 0, recordMeta{}, false, fmt.Errorf("find record log end: %w", err)
	}
	ok := ri.last()
	off, rm := ri.off, ri.meta
	if err := ri.close(); err != nil {
		return 0, recordMeta{}, false, fmt.Errorf("find record log end: %w", err)
	}
	return off, rm, ok, nil
}

// recordAt reads the meta of the record at off; an error wrapping
// pebble.ErrNotFound if the copy does not hold it.
func recordAt(db *pebble.DB, id, off uint64) (recordMeta, error) {
	ri, err := newRecordIter(db, id)
	if err != nil {
		return recordMeta{}, fmt.Errorf("read record %d: %w", off, err)
	}
	found := ri.seekGE(off) && ri.off == off
	rm := ri.meta
	if err := ri.close(); err != nil {
		return recordMeta{}, fmt.Errorf("read record %d: %w", off, err)
	}
	if !found {
		return recordMeta{}, fmt.Errorf("read record %d: %w", off, pebble.ErrNotFound)
	}
	return rm, nil
}

// foldEvents applies the cursor events in [from, below) to state and
// returns the offset after the last one (from if there are none). The
// events must be contiguous from from.
func foldEvents(db *pebble.DB, id uint64, state map[string]uint64, from, below uint64) (_ uint64, err error) {
	upper := eventLogEnd(id)
	if below != ^uint64(0) {
		upper = eventKey(id, below)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: eventKey(id, from), UpperBound: upper})
	if err != nil {
		return 0, fmt.Errorf("replay cursor events: %w", err)
	}
	defer closeIter(it, &err, "replay cursor events")
	tail := from
	for it.First(); it.Valid(); it.Next() {
		off, err := keyOffset(it.Key())
		if err != nil {
			return 0, err
		}
		if off != tail {
			return 0, fmt.Errorf("replay cursor events: found event %d where %d was expected", off, tail)
		}
		cursor, pos, err := decodeEvent(it.Value())
		if err != nil {
			return 0, fmt.Errorf("cursor event %d: %w", off, err)
		}
		state[cursor] = pos
		tail = off + 1
	}
	return tail, it.Error()
}

// clampCursors lowers every position above tail to tail.
func clampCursors(state map[string]uint64, tail uint64) bool {
	clamped := false
	for k, v := range state {
		if v > tail {
			state[k] = tail
			clamped = true
		}
	}
	return clamped
}

// signalLocked wakes everyone waiting on Changed or WrittenChanged, and
// tells Options.OnChange.
func (c *copyImpl) signalLocked() {
	close(c.writtenCh)
	c.writtenCh = make(chan struct{})
	c.signalDurableLocked()
}

// signalDurableLocked wakes those waiting on Changed, not those on
// WrittenChanged, and tells Options.OnChange: for a group commit that only
// made written records durable, which adds nothing a reader of written
// records has not been woken for already (appendWritten signalled them).
func (c *copyImpl) signalDurableLocked() {
	close(c.changedCh)
	c.changedCh = make(chan struct{})
	if c.s.onChange != nil {
		c.s.onChange(c.name)
	}
}

// waitChangeLocked releases mu until the next change (or ctx ends).
func (c *copyImpl) waitChangeLocked(ctx context.Context) error {
	ch := c.changedCh
	c.mu.Unlock()
	defer c.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exclusive runs fn alone on the copy: new writes wait at the gate, and fn
// starts only once every write already queued has committed, so fn sees
// stable tails (tail == next) and whatever it reports cannot be overtaken
// by a write from before it.
func (c *copyImpl) exclusive(fn func() error) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return fmt.Errorf("streamlog: %s: %w", c.name, ErrDeleted)
	}
	gate := make(chan struct{})
	c.gate = gate
	defer func() {
		c.mu.Lock()
		c.gate = nil
		close(gate)
		c.mu.Unlock()
	}()
	for c.tail != c.next || c.cWritten != c.cNext {
		if err := c.s.failure(); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("streamlog: %s: store failed: %w", c.name, err)
		}
		_ = c.waitChangeLocked(context.Background())
	}
	c.mu.Unlock()
	return fn()
}

// writableLocked waits for any exclusive operation to finish and then
// checks that the copy takes writes.
func (c *copyImpl) writableLocked(ctx context.Context, op string) error {
	for c.gate != nil {
		g := c.gate
		c.mu.Unlock()
		select {
		case <-g:
		case <-ctx.Done():
			c.mu.Lock()
			return fmt.Errorf("streamlog: %s to %s: %w", op, c.name, ctx.Err())
		}
		c.mu.Lock()
	}
	if c.deleted {
		return fmt.Errorf("streamlog: %s to %s: %w", op, c.name, ErrDeleted)
	}
	if c.meta.Sealed {
		return fmt.Errorf("streamlog: %s to %s: fenced at epoch %d: %w", op, c.name, c.meta.Seal.FenceEpoch, ErrSealed)
	}
	return nil
}

func (c *copyImpl) stream() string   { return c.name }
func (c *copyImpl) streamID() uint64 { return c.sid }

// prepareRecords encodes records into one request, outside the copy's
// lock: everything but their offsets, running digests and batch keys,
// which assign fills in under the lock. Record i gets times[i], or now if
// times is nil. The records are cut into batches (batch.go), one key each.
func (c *copyImpl) prepareRecords(data [][]byte, times []int64, now int64) *request {
	// Where each batch ends and its value's size, found once: a request
	// of up to eight batches (2,048 records) keeps them on the stack.
	type span struct{ end, size int }
	var small [8]span
	spans := small[:0]
	size := 0
	for i := 0; i < len(data); {
		j, n := chunkEnd(data, i)
		spans = append(spans, span{j, n})
		size += offsetKeyLen + n
		i = j
	}
	r := &request{c: c, size: size, kvs: make([]kv, len(spans)), vals: make([][]byte, len(data)), done: make(chan error, 1)}
	slab := make([]byte, size)
	i := 0
	for b, sp := range spans {
		k, v := slab[:offsetKeyLen], slab[offsetKeyLen:offsetKeyLen+sp.size]
		slab = slab[offsetKeyLen+sp.size:]
		binary.BigEndian.PutUint32(v, uint32(sp.end-i))
		pos := batchCountLen
		for ; i < sp.end; i++ {
			p := data[i]
			l := recordHeaderLen + len(p)
			binary.BigEndian.PutUint32(v[pos:], uint32(l))
			e := v[pos+entryLenLen : pos+entryLenLen+l]
			t := now
			if times != nil {
				t = times[i]
			}
			putRecordValue(e, recordMeta{timeNS: t}, p)
			r.vals[i] = e
			pos += entryLenLen + l
		}
		r.kvs[b] = kv{k, v}
	}
	return r
}

// assign places prepared records at offsets from first on, chaining the
// digest from d and the byte count from cum, and keys each batch by its
// last record's offset.
func (r *request) assign(id, first, d, cum uint64) {
	for i, e := range r.vals {
		off := first + uint64(i)
		data := e[recordHeaderLen:]
		d = chainDigest(d, off, data)
		cum += uint64(len(data))
		putChain(e, d, cum)
	}
	end := first
	for _, b := range r.kvs {
		end += uint64(binary.BigEndian.Uint32(b.v))
		putBatchKey(b.k, id, end-1)
	}
	r.recs, r.recEnd, r.recDigest, r.recCum = true, first+uint64(len(r.vals)), d, cum
}

func (c *copyImpl) append(ctx context.Context, data [][]byte) (uint64, error) {
	first, durable, err := c.appendWritten(ctx, data)
	if err != nil {
		return 0, err
	}
	return first, durable(ctx)
}

// errDurableTwice answers a second call of an append's durable func.
var errDurableTwice = errors.New("streamlog: durable called twice")

// appendWritten writes records as the owner and returns once they are
// written (Copy.AppendWritten): durable waits for their group commit and
// must be called once.
func (c *copyImpl) appendWritten(ctx context.Context, data [][]byte) (uint64, func(context.Context) error, error) {
	if len(data) == 0 {
		return 0, nil, fmt.Errorf("streamlog: append to %s: no records", c.name)
	}
	if err := c.s.enter(); err != nil {
		return 0, nil, err
	}
	r := c.prepareRecords(data, nil, time.Now().UnixNano())
	c.mu.Lock()
	if err := c.writableLocked(ctx, "append"); err != nil {
		c.mu.Unlock()
		c.s.leave()
		return 0, nil, err
	}
	first := c.next
	r.assign(c.id, first, c.nextDigest, c.nextCum)
	r.announced = true // signalled below, once queued
	if err := c.s.enqueue(r); err != nil {
		c.mu.Unlock()
		c.s.leave()
		return 0, nil, fmt.Errorf("streamlog: append to %s: %w", c.name, err)
	}
	c.next, c.nextDigest, c.nextCum = r.recEnd, r.recDigest, r.recCum
	c.written = append(c.written, r)
	// Wake whoever waits for written records (an owner's replication
	// requests): they may be served before the group commit is durable.
	c.signalLocked()
	c.mu.Unlock()
	return first, c.durableFunc(r, "append", first), nil
}

// durableFunc is the durable func of a write (op) of r at offset at: it
// waits for r's group commit once and then leaves the store (the write
// entered it); a second call is errDurableTwice.
func (c *copyImpl) durableFunc(r *request, op string, at uint64) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) error {
		err := errDurableTwice
		once.Do(func() {
			defer c.s.leave()
			if err = c.s.wait(ctx, r); err != nil {
				err = fmt.Errorf("streamlog: %s to %s at %d: %w", op, c.name, at, err)
			}
		})
		return err
	}
}

func (c *copyImpl) apply(ctx context.Context, recs []Record) error {
	durable, err := c.applyWritten(ctx, recs)
	if err != nil {
		return err
	}
	return durable(ctx)
}

// durableNow is the durable func of an apply that wrote nothing.
func durableNow(context.Context) error { return nil }

// applyWritten writes records as a follower and returns once they are
// written (Copy.ApplyWritten): durable waits for their group commit and
// must be called once.
func (c *copyImpl) applyWritten(ctx context.Context, recs []Record) (func(context.Context) error, error) {
	if len(recs) == 0 {
		return durableNow, nil
	}
	first := recs[0].Offset
	for i, r := range recs {
		if r.Offset != first+uint64(i) {
			return nil, fmt.Errorf("streamlog: apply to %s: record %d has offset %d, want %d: records must be contiguous", c.name, i, r.Offset, first+uint64(i))
		}
	}
	end := first + uint64(len(recs))
	if err := c.s.enter(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if err := c.settleOverlapLocked(ctx, "apply", "record", first, end, func() (uint64, uint64) { return c.next, c.tail }); err != nil {
		c.mu.Unlock()
		c.s.leave()
		return nil, err
	}
	// Records below the head were removed by retention and cannot be
	// compared; they are skipped like identical ones.
	if lo, hi := max(first, c.meta.Head), min(end, c.next); lo < hi {
		if err := c.compareRecords(recs[lo-first : hi-first]); err != nil {
			c.mu.Unlock()
			c.s.leave()
			return nil, err
		}
	}
	if end <= c.next {
		c.mu.Unlock()
		c.s.leave()
		return durableNow, nil
	}
	fresh := recs[max(first, c.next)-first:]
	data := make([][]byte, len(fresh))
	times := make([]int64, len(fresh))
	for i, r := range fresh {
		data[i], times[i] = r.Data, r.TimeNS
	}
	r := c.prepareRecords(data, times, 0)
	r.assign(c.id, c.next, c.nextDigest, c.nextCum)
	if err := c.s.enqueue(r); err != nil {
		c.mu.Unlock()
		c.s.leave()
		return nil, fmt.Errorf("streamlog: apply to %s: %w", c.name, err)
	}
	c.next, c.nextDigest, c.nextCum = r.recEnd, r.recDigest, r.recCum
	c.written = append(c.written, r)
	c.mu.Unlock()
	return c.durableFunc(r, "apply", fresh[0].Offset), nil
}

// compareRecords checks recs against the durable records at their offsets
// (as compareHeld does for cursor events).
func (c *copyImpl) compareRecords(recs []Record) (err error) {
	lo := recs[0].Offset
	hi := lo + uint64(len(recs))
	ri, err := newRecordIter(c.s.db, c.id)
	if err != nil {
		return fmt.Errorf("streamlog: apply to %s: read overlap: %w", c.name, err)
	}
	defer func() {
		if cerr := ri.close(); cerr != nil && err == nil {
			err = fmt.Errorf("streamlog: apply to %s: read overlap: %w", c.name, cerr)
		}
	}()
	want := lo
	for ok := ri.seekGE(lo); ok && ri.off < hi; ok = ri.next() {
		if ri.off != want {
			break
		}
		if !bytes.Equal(ri.data, recs[want-lo].Data) {
			return fmt.Errorf("streamlog: apply to %s: record %d: %w", c.name, want, ErrDiverged)
		}
		want++
	}
	if ri.err == nil && want != hi {
		return fmt.Errorf("streamlog: apply to %s: held record %d is missing", c.name, want)
	}
	return nil
}

func (c *copyImpl) appendCursor(cursor string, position uint64) (uint64, error) {
	if cursor == "" {
		return 0, fmt.Errorf("streamlog: cursor event on %s: empty cursor name", c.name)
	}
	if err := c.s.enter(); err != nil {
		return 0, err
	}
	defer c.s.leave()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if err := c.writableLocked(context.Background(), "cursor event"); err != nil {
			return 0, err
		}
		// Applied events still queued hold the offsets below cNext; an
		// owner event must follow them in the log.
		if c.cWritten == c.cNext {
			break
		}
		if err := c.s.failure(); err != nil {
			return 0, fmt.Errorf("streamlog: cursor event on %s: %w", c.name, err)
		}
		_ = c.waitChangeLocked(context.Background())
	}
	if position > c.tail {
		return 0, fmt.Errorf("streamlog: cursor %s on %s at %d: beyond the record tail %d", cursor, c.name, position, c.tail)
	}
	off := c.cNext
	b := c.s.db.NewBatch()
	defer releaseBatch(b)
	_ = b.Set(eventKey(c.id, off), encodeEvent(cursor, position), nil)
	old, had := c.cursors[cursor]
	c.cursors[cursor] = position
	snap := off+1-c.snapNext >= c.s.snapEvery
	if snap {
		// In the same batch as the event: the snapshot and the events
		// below its boundary become durable together or not at all.
		_ = b.Set(snapshotKey(c.id), encodeSnapshot(off+1, c.cursors), nil)
	}
	if err := c.s.guard(func() error { return b.Commit(pebble.NoSync) }); err != nil {
		if had {
			c.cursors[cursor] = old
		} else {
			delete(c.cursors, cursor)
		}
		return 0, fmt.Errorf("streamlog: cursor event on %s: %w", c.name, err)
	}
	c.cNext, c.cWritten = off+1, off+1
	if snap {
		c.snapBoundary, c.snapNext = off+1, off+1
	}
	c.s.markUnsynced(c)
	c.signalLocked()
	return off, nil
}

func (c *copyImpl) applyCursorEvents(ctx context.Context, evs []CursorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	first := evs[0].Offset
	for i, e := range evs {
		if e.Offset != first+uint64(i) {
			return fmt.Errorf("streamlog: apply cursor events to %s: event %d has offset %d, want %d: events must be contiguous", c.name, i, e.Offset, first+uint64(i))
		}
		if e.Cursor == "" {
			return fmt.Errorf("streamlog: apply cursor events to %s: event %d has no cursor name", c.name, e.Offset)
		}
	}
	end := first + uint64(len(evs))
	if err := c.s.enter(); err != nil {
		return err
	}
	defer c.s.leave()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.settleOverlapLocked(ctx, "apply cursor events", "cursor event", first, end, func() (uint64, uint64) { return c.cNext, c.cWritten }); err != nil {
		return err
	}
	if lo, hi := max(first, c.meta.CursorStart), min(end, c.cNext); lo < hi {
		if err := c.compareEvents(evs[lo-first : hi-first]); err != nil {
			return err
		}
	}
	if end <= c.cNext {
		return nil
	}
	fresh := evs[max(first, c.cNext)-first:]
	r := &request{c: c, done: make(chan error, 1)}
	for _, e := range fresh {
		k, v := eventKey(c.id, e.Offset), encodeEvent(e.Cursor, e.Position)
		r.kvs = append(r.kvs, kv{k, v})
		r.size += len(k) + len(v)
		c.cursors[e.Cursor] = e.Position
	}
	r.evs, r.evEnd = true, end
	if end-c.snapNext >= c.s.snapEvery {
		v := encodeSnapshot(end, c.cursors)
		r.kvs = append(r.kvs, kv{snapshotKey(c.id), v})
		r.size += len(v) + 10
		r.snap = true
	}
	if err := c.s.enqueue(r); err != nil {
		return fmt.Errorf("streamlog: apply cursor events to %s: %w", c.name, err)
	}
	c.cNext = end
	if r.snap {
		c.snapNext = end
	}
	c.mu.Unlock()
	err := c.s.wait(ctx, r)
	c.mu.Lock()
	if err != nil {
		return fmt.Errorf("streamlog: apply cursor events to %s at %d: %w", c.name, fresh[0].Offset, err)
	}
	return nil
}

// compareEvents checks evs against the held events at their offsets.
func (c *copyImpl) compareEvents(evs []CursorEvent) error {
	lo := evs[0].Offset
	return c.compareHeld("apply cursor events", "event", tagEvent, lo, lo+uint64(len(evs)), func(off uint64, value []byte) (bool, error) {
		cursor, pos, err := decodeEvent(value)
		e := evs[off-lo]
		return err == nil && e.Cursor == cursor && e.Position == pos, err
	})
}

// compareHeld walks the durable entries of one log (tag) at offsets
// [lo, hi) and asks same whether each matches what a follower applies; a
// missing entry, an undecodable one, or a mismatch (ErrDiverged) is an
// error. Followers re-sent an overlap after a lost reply must agree with
// what the copy holds, or the two histories have forked.
func (c *copyImpl) compareHeld(what, entry string, tag byte, lo, hi uint64, same func(off uint64, value []byte) (bool, error)) (err error) {
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: offsetKey(c.id, tag, lo), UpperBound: offsetKey(c.id, tag, hi)})
	if err != nil {
		return fmt.Errorf("streamlog: %s to %s: read overlap: %w", what, c.name, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("streamlog: %s to %s: read overlap: %w", what, c.name, cerr)
		}
	}()
	want := lo
	for it.First(); it.Valid(); it.Next() {
		off, err := keyOffset(it.Key())
		if err != nil {
			return err
		}
		if off != want {
			return fmt.Errorf("streamlog: %s to %s: held %s %d is missing", what, c.name, entry, want)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("streamlog: %s to %s: read %s %d: %w", what, c.name, entry, off, err)
		}
		ok, err := same(off, v)
		if err != nil {
			return fmt.Errorf("streamlog: %s to %s: %s %d: %w", what, c.name, entry, off, err)
		}
		if !ok {
			return fmt.Errorf("streamlog: %s to %s: %s %d: %w", what, c.name, entry, off, ErrDiverged)
		}
		want++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("streamlog: %s to %s: read overlap: %w", what, c.name, err)
	}
	if want != hi {
		return fmt.Errorf("streamlog: %s to %s: held %s %d is missing", what, c.name, entry, want)
	}
	return nil
}

func (c *copyImpl) syncCursors() error {
	if err := c.s.enter(); err != nil {
		return err
	}
	defer c.s.leave()
	c.mu.Lock()
	deleted := c.deleted
	c.mu.Unlock()
	if deleted {
		return fmt.Errorf("streamlog: sync cursors of %s: %w", c.name, ErrDeleted)
	}
	if err := c.s.syncCursorsOf(context.Background(), []*copyImpl{c}); err != nil {
		return fmt.Errorf("streamlog: sync cursors of %s: %w", c.name, err)
	}
	return nil
}

// cursorSyncLoop makes written cursor events durable every interval.
func (s *impl) cursorSyncLoop(interval time.Duration) {
	defer close(s.syncDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
		}
		cs := s.takeUnsynced()
		if len(cs) == 0 {
			continue
		}
		if err := s.syncCursorsOf(context.Background(), cs); err != nil {
			// Not marked again: a failed synced write fails the store for
			// good (fail-stop, see Failure), so a retry at the next tick
			// could only fail again and log it every interval.
			if !errors.Is(err, ErrClosed) {
				s.log.Warn("periodic cursor sync failed", "err", err)
			}
		}
	}
}

// markUnsynced records that c has owner cursor events written without a
// sync, for the next tick of cursorSyncLoop.
func (s *impl) markUnsynced(c *copyImpl) {
	s.unsyncedMu.Lock()
	if s.unsynced == nil {
		s.unsynced = map[*copyImpl]struct{}{}
	}
	s.unsynced[c] = struct{}{}
	s.unsyncedMu.Unlock()
}

// takeUnsynced returns the copies marked since the last call and clears
// the set. A copy marked again while its sync runs is in the next set;
// one made durable meanwhile by another synced write is skipped by
// syncCursorsOf, which looks at each copy's tails.
func (s *impl) takeUnsynced() []*copyImpl {
	s.unsyncedMu.Lock()
	defer s.unsyncedMu.Unlock()
	if len(s.unsynced) == 0 {
		return nil
	}
	cs := make([]*copyImpl, 0, len(s.unsynced))
	for c := range s.unsynced {
		cs = append(cs, c)
	}
	clear(s.unsynced)
	return cs
}

func (c *copyImpl) cursor(name string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.cursors[name]
	return p, ok
}

func (c *copyImpl) tailsLocked() Tails {
	return Tails{
		Head:          c.meta.Head,
		HeadDigest:    c.meta.HeadDigest,
		Record:        c.tail,
		RecordDigest:  c.tailDigest,
		RecordWritten: c.next,
		WrittenDigest: c.nextDigest,
		CursorHead:    c.snapBoundary,
		CursorWritten: c.cWritten,
		CursorDurable: c.cDurable,
	}
}

func (c *copyImpl) tails() Tails {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tailsLocked()
}

func (c *copyImpl) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changedCh
}

func (c *copyImpl) writtenChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writtenCh
}

func (c *copyImpl) logEpochs() []wire.LogEpoch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.meta.LogEpochs)
}

func lastEpoch(les []wire.LogEpoch) uint64 {
	if len(les) == 0 {
		return 0
	}
	return les[len(les)-1].Epoch
}

func (c *copyImpl) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lastEpoch(c.meta.LogEpochs)
}

func (c *copyImpl) sealInfo() (Seal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.meta.Sealed {
		return Seal{}, false
	}
	return c.meta.clone().Seal, true
}

func (c *copyImpl) digest() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return formatDigest(c.tailDigest)
}

// digestAt reads the running digest of the records below off: the head's
// from metadata, the tail's and the previous tail's (prevTail) from
// memory, anything else between from the record at off-1, and past the
// durable tail (up to the written one) from the queued record at off-1.
func (c *copyImpl) digestAt(off uint64) (uint64, error) {
	if err := c.s.enter(); err != nil {
		return 0, err
	}
	defer c.s.leave()
	for {
		c.mu.Lock()
		head, hd, tail, td, deleted := c.meta.Head, c.meta.HeadDigest, c.tail, c.tailDigest, c.deleted
		prevOK, prev, pd := c.prevOK, c.prevTail, c.prevDigest
		c.mu.Unlock()
		switch {
		case deleted:
			return 0, fmt.Errorf("streamlog: digest of %s at %d: %w", c.name, off, ErrDeleted)
		case off < head:
			return 0, fmt.Errorf("streamlog: digest of %s at %d: head is %d: %w", c.name, off, head, ErrBelowHead)
		case off > tail:
			c.mu.Lock()
			d, ok := uint64(0), false
			if off > c.tail && off <= c.next {
				d, ok = c.writtenDigestLocked(off)
			}
			durable, written := c.tail, c.next
			c.mu.Unlock()
			switch {
			case ok:
				return d, nil
			case durable >= off:
				continue // became durable in between
			}
			return 0, fmt.Errorf("streamlog: digest of %s at %d: beyond the written record tail %d", c.name, off, written)
		case off == head:
			return hd, nil
		case off == tail:
			return td, nil
		case prevOK && off == prev:
			return pd, nil
		}
		rm, err := recordAt(c.s.db, c.id, off-1)
		if errors.Is(err, pebble.ErrNotFound) {
			// Retention (or a cut) removed the record after the bounds
			// were read; read them again.
			c.mu.Lock()
			moved := c.meta.Head != head || c.tail != tail || c.deleted
			c.mu.Unlock()
			if moved {
				continue
			}
		}
		if err != nil {
			return 0, fmt.Errorf("streamlog: digest of %s at %d: %w", c.name, off, err)
		}
		return rm.digest, nil
	}
}

// cursorsSnapshot returns a copy of the cursor fold (for tests and
// diagnostics).
func (c *copyImpl) cursorsSnapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.cursors)
}

// settleOverlapLocked prepares a follower's apply of entries [first, end)
// with c.mu held: it fails with ErrGap when first is past the log's tail,
// and waits while the part that overlaps what the copy holds reaches
// entries still queued for commit, so that the overlap is compared against
// what is durable in the database. tails returns the log's next offset to
// assign and its written (committed) tail.
func (c *copyImpl) settleOverlapLocked(ctx context.Context, what, entry string, first, end uint64, tails func() (next, written uint64)) error {
	for {
		if err := c.writableLocked(ctx, what); err != nil {
			return err
		}
		next, written := tails()
		if first > next {
			return fmt.Errorf("streamlog: %s to %s at %d: %s tail is %d: %w", what, c.name, first, entry, next, ErrGap)
		}
		if ovEnd := min(end, next); first < ovEnd && ovEnd > written {
			if err := c.s.failure(); err != nil {
				return fmt.Errorf("streamlog: %s to %s: %w", what, c.name, err)
			}
			if err := c.waitChangeLocked(ctx); err != nil {
				return fmt.Errorf("streamlog: %s to %s: %w", what, c.name, err)
			}
			continue
		}
		return nil
	}
}
