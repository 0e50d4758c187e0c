package host

import (
	"encoding/binary"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// hostWaiters is the owner host's side: per follower node the set of idle
// copies its host waits named (waitSet), kept across the host waits that
// replace one another, and at most one parked host wait serving it; a
// newer one replaces the older, which ends unanswered.
type hostWaiters struct {
	mu     sync.RWMutex
	closed bool
	sets   map[string]*waitSet // by follower node
	n      atomic.Int32        // len(sets), read without mu by changed
	// checked counts the copies the passes looked at (the tests read it).
	checked atomic.Int64
	// marks, while start's goroutine runs, takes the store's changes to
	// it (changed); nil: changed marks them itself.
	marks atomic.Pointer[markQueue]
	// overflows counts the changes that found the marking queue full,
	// each making the next marking look at every watched copy (exported
	// as brook.host.idle.mark_overflows).
	overflows atomic.Int64
}

// markQueue carries the streams the store reports changed to the
// goroutine that marks them in the sets (hostWaiters.markLoop). The store
// reports with the copy's lock held, and the copy's lock is what its group
// commit takes to complete an append: while OnChange waited for
// hostWaiters.mu (held to apply a whole host wait, and then queued for by
// every appender behind a writer) or a set's mu (hundreds of appenders in
// a row, each handed it in turn on a saturated machine), the host's group
// commits stopped, and with them every confirm of the host: seconds
// without a confirm in a 10,000-stream failover. A change now costs a
// send that never waits.
type markQueue struct {
	streams chan string
	// overflow says a change found streams full: the loop then marks
	// every watched copy of every set (what a lost change could have
	// named).
	overflow atomic.Bool
	// kick wakes the loop after overflow is set: the queue may have
	// drained between the failed send and the flag, and the loop would
	// otherwise sleep on it (buffered 1).
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// markQueueLen bounds the changes waiting for the loop; past it a change
// costs a look at every watched copy.
const markQueueLen = 8192

// markBatch is how many changes the loop marks under one hold of the
// locks.
const markBatch = 256

// waitSetKeep is how long an owner host keeps the set of a follower host
// that sends no more host waits (it has no idle copy here, or is gone). A
// follower host with idle copies sends one at least every maxReplWait
// and a gap; one whose set was dropped has its next change refused, and
// sends its whole set.
const waitSetKeep = 4 * maxReplWait

// waitSet is one follower host's idle set at this owner host: the copies
// of its last full host wait with the changes since applied
// (frame.HostWaitChange), so that a copy joining the set costs a look at
// that copy, not at the whole set (issue 17). A pass looks at the copies
// in dirty; it looks at every copy when it is the first of a host wait
// that named them all, or half a wait after the last such pass (a parked
// wait makes one then, waitSet.take): that pass keeps the copies live
// (owner.hostWaitQuiet's refresh) and notices what signals no change (a
// follower removed from a stream's assignment), as every host wait's
// first pass did before.
type waitSet struct {
	node string
	// mu guards the fields below. It is taken alone or under
	// hostWaiters.mu; the marking of the store's changes takes it
	// (changed, markLoop), so no owner's or copy's lock is taken, and
	// nothing sent, while it is held.
	mu sync.Mutex
	// gen is the generation of copies the sender gave it
	// (frame.HeaderHostWaitGen), when hasGen: a change based on any other
	// is refused, and the sender sends its whole set.
	gen    uint64
	hasGen bool
	copies map[uint64]*setCopy // by stream id
	size   int                 // the copies' encoded size
	// watch maps the stream name of each copy whose owner runs here to
	// its stream id: a change of the stream marks the copy dirty. It is
	// set by a pass before the pass reads the owners (review R6).
	watch map[string]uint64
	// dirty are the copies the next pass looks at: joined or changed,
	// their stream changed, their ack on its way (hostWakeIDs' inFlight),
	// or named in an answer the sender may not have had.
	dirty map[uint64]struct{}
	// woken are the stream ids the last answer named. The sender's next
	// change names them as left, or as joined again; those it does not
	// name, it never had the answer for (a host wait it replaced), and
	// they are looked at again.
	woken  []uint64
	fullAt time.Time   // the last pass over every copy
	last   time.Time   // the last host wait
	cur    *parkedWait // the parked wait serving the set, nil when none
}

// setCopy is one copy of a waitSet.
type setCopy struct {
	c      frame.HostWaitCopy
	stream string // its stream's name, once a pass found its owner here
}

// parkedWait is one follower host's host wait at this owner host.
type parkedWait struct {
	reply  hostWaitReplier // nil: not answered
	set    *waitSet
	waitMS uint32
	// full says the host wait named the whole set: its first pass looks
	// at every copy.
	full bool
	// gen is the generation its answer carries (frame.HeaderHostWaitGen),
	// "" for a sender of an earlier release.
	gen  string
	wake chan struct{} // buffered 1: a watched stream changed
	end  chan struct{} // closed when replaced or closed
	// closing says the host stops (under hostWaiters.mu): the wait is
	// answered shutting_down, not dropped.
	closing bool
	// records says the sender takes records in the wake
	// (frame.HeaderWakeRecords).
	records bool
}

// onHostWait serves a host wait the link delivers (replLink.serveHostWaits,
// one per pair of hosts). It applies the host
// wait to its sender's set, whole or changed (in the order they arrived),
// parks it (replacing the sender's older one) and serves it in a
// goroutine of the host's request group within the replication budget. A
// whole set that carries a generation is answered at once, with nothing
// and that generation, so that the sender's next host wait can be a
// change (its joins would otherwise cancel every whole set before its
// answer). A change based on a generation this host does not hold is
// answered at once with nothing and no generation: the sender sends its
// whole set.
func (h *Host) onHostWait(c hostWaitCall) {
	h.metrics.replReceived(replKindHostWait)
	var full *frame.HostWait
	var change *frame.HostWaitChange
	var node string
	var waitMS uint32
	var err error
	if frame.IsHostWaitChange(c.data) {
		if change, err = frame.DecodeHostWaitChange(c.data); err == nil {
			node, waitMS = change.Node, change.WaitMS
		}
	} else if full, err = frame.DecodeHostWait(c.data); err == nil {
		node, waitMS = full.Node, full.WaitMS
	}
	var gen uint64
	if err == nil && full != nil && c.gen != "" {
		gen, err = strconv.ParseUint(c.gen, 10, 64)
	}
	fail := c.fail
	if err != nil {
		fail(wire.Errorf(wire.CodeBadRequest, "host wait: %v", err))
		return
	}
	// As for replication, c.from is the sender as the link authenticated
	// it, so a body naming another node is a host speaking for another.
	if node != c.from {
		h.log.Warn("host wait names another node than its sender; refused", "sender", c.from, "body_node", node)
		fail(wire.Errorf(wire.CodeBadRequest, "host wait from node %s names node %s", c.from, node))
		return
	}
	pw := &parkedWait{reply: c.reply, waitMS: waitMS, full: full != nil, wake: make(chan struct{}, 1), end: make(chan struct{}),
		records: c.records}
	now := time.Now()
	w := &h.parked
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		fail(h.stopping())
		return
	}
	w.sweep(node, now)
	s := w.sets[node]
	if s == nil {
		s = &waitSet{node: node}
		if w.sets == nil {
			w.sets = map[string]*waitSet{}
		}
		w.sets[node] = s
		w.n.Store(int32(len(w.sets)))
	}
	pw.set = s
	s.mu.Lock()
	applied := true
	if full != nil {
		s.replace(full, gen, c.gen != "")
	} else {
		applied = s.apply(change)
	}
	size := s.size
	tooLarge := size > frame.MaxHostWaitBytes-frame.HostWaitHeaderMax
	if s.hasGen {
		pw.gen = strconv.FormatUint(s.gen, 10)
	}
	old := s.cur
	s.cur, s.last = nil, now
	if applied && !tooLarge {
		s.cur = pw
	}
	s.mu.Unlock()
	if old != nil {
		close(old.end)
	}
	if tooLarge {
		delete(w.sets, node)
		w.n.Store(int32(len(w.sets)))
	}
	w.mu.Unlock()
	switch {
	case !applied:
		h.log.Debug("host wait change on a set this host does not hold; asking for the whole set", "node", node, "base", change.Base)
		h.answerHostWait(pw, &frame.HostWake{})
		return
	case pw.full && pw.gen != "" && !tooLarge:
		// A whole set from a sender that gives generations is answered at
		// once, before any pass: the answer's generation tells the sender
		// that this host holds its set, and its next host wait, a change,
		// parks and has every copy looked at (replace marked them all).
		// Parked, or answered only after a pass over every copy, the whole
		// set could be cancelled by the next copy joining (every 100 ms
		// while streams are created) before any answer came, and the
		// sender would send whole sets on and on.
		h.answerHostWait(pw, &frame.HostWake{})
		s.remove(pw)
		return
	case tooLarge:
		fail(wire.Errorf(wire.CodeBadRequest, "host wait: the set of %d bytes is over %d", size, frame.MaxHostWaitBytes))
		return
	}
	if !h.replReqs.take() {
		s.remove(pw)
		h.refuse(fail, h.replReqs)
		return
	}
	if !h.reqs.Go(func() {
		defer h.replReqs.give()
		h.serveHostWait(pw)
	}) {
		h.replReqs.give()
		s.remove(pw)
		fail(h.stopping())
	}
}

// sweep drops the sets, other than node's, of follower hosts that sent
// no host wait for waitSetKeep. Under hostWaiters.mu.
func (w *hostWaiters) sweep(node string, now time.Time) {
	for n, s := range w.sets {
		if n == node {
			continue
		}
		s.mu.Lock()
		drop := s.cur == nil && now.Sub(s.last) > waitSetKeep
		s.mu.Unlock()
		if drop {
			delete(w.sets, n)
		}
	}
	w.n.Store(int32(len(w.sets)))
}

// replace makes req the whole set, of generation gen when hasGen. Under
// s.mu.
func (s *waitSet) replace(req *frame.HostWait, gen uint64, hasGen bool) {
	s.gen, s.hasGen = gen, hasGen
	s.copies = make(map[uint64]*setCopy, len(req.Copies))
	s.watch = make(map[string]uint64, len(req.Copies))
	s.dirty = map[uint64]struct{}{}
	s.woken, s.size = nil, 0
	for _, c := range req.Copies {
		s.join(c)
	}
}

// apply applies a change to the set, if it is based on the generation
// the set has; otherwise the set takes no more changes until it is
// replaced. Under s.mu.
func (s *waitSet) apply(c *frame.HostWaitChange) bool {
	if !s.hasGen || c.Base != s.gen {
		s.hasGen = false
		return false
	}
	for _, id := range s.woken {
		s.dirty[id] = struct{}{}
	}
	s.woken = nil
	for _, id := range c.Left {
		s.leave(id)
	}
	for _, cp := range c.Copies {
		s.join(cp)
	}
	s.gen = c.Gen
	return true
}

// join adds or replaces a copy, dirty. Under s.mu.
func (s *waitSet) join(c frame.HostWaitCopy) {
	if old := s.copies[c.StreamID]; old != nil {
		s.size -= old.c.Size()
		old.c = c
	} else {
		s.copies[c.StreamID] = &setCopy{c: c}
	}
	s.size += c.Size()
	s.dirty[c.StreamID] = struct{}{}
}

// leave removes a copy. Under s.mu.
func (s *waitSet) leave(id uint64) {
	sc := s.copies[id]
	if sc == nil {
		return
	}
	if sc.stream != "" && s.watch[sc.stream] == id {
		delete(s.watch, sc.stream)
	}
	s.size -= sc.c.Size()
	delete(s.copies, id)
	delete(s.dirty, id)
}

// take returns the copies a pass of pw looks at, whether they are all of
// them, and when the next pass over all of them is due; or false when pw
// no longer serves the set. A pass looks at every copy when it is pw's
// first and pw named them all, or when the last such pass was wait/2 ago
// or more; otherwise at the dirty ones. The copies taken are no longer
// dirty: what changes after is marked again.
func (s *waitSet) take(pw *parkedWait, first bool, wait time.Duration, now time.Time) (check []frame.HostWaitCopy, all bool, due time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != pw {
		return nil, false, time.Time{}, false
	}
	all = first && pw.full || now.Sub(s.fullAt) >= wait/2
	if all {
		s.fullAt = now
		check = make([]frame.HostWaitCopy, 0, len(s.copies))
		for _, sc := range s.copies {
			check = append(check, sc.c)
		}
		// A new map: clearing one that held every copy costs as much.
		s.dirty = map[uint64]struct{}{}
		return check, true, now.Add(wait / 2), true
	}
	for id := range s.dirty {
		if sc := s.copies[id]; sc != nil {
			check = append(check, sc.c)
		}
		delete(s.dirty, id) // not clear: its cost is the map's size
	}
	return check, false, s.fullAt.Add(wait / 2), true
}

// watchOwners puts into the watch the copies of check whose owner
// (owners[i]) runs here, before a pass reads their owners and tails.
func (s *waitSet) watchOwners(check []frame.HostWaitCopy, owners []*owner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range owners {
		if o == nil {
			continue
		}
		sc := s.copies[check[i].StreamID]
		if sc == nil || sc.stream == o.stream && s.watch[o.stream] == o.id {
			continue
		}
		sc.stream = o.stream
		s.watch[o.stream] = o.id
	}
}

// again marks dirty the copies a pass of from must look at again: those
// whose ack is on its way (from looks again after hostWaitGap), and the
// copies an answer of a replaced wait named (its sender cancelled that
// request). When from no longer serves the set, the wait now serving it
// is signalled to look at once: its own passes did not take them (review).
func (s *waitSet) again(ids []uint64, from *parkedWait) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.copies[id] != nil {
			s.dirty[id] = struct{}{}
		}
	}
	if s.cur != nil && s.cur != from {
		select {
		case s.cur.wake <- struct{}{}:
		default:
		}
	}
}

// answerHostWait answers pw with wake and the generation of its set,
// having recorded what it names (waitSet.answered).
func (h *Host) answerHostWait(pw *parkedWait, wake *frame.HostWake) {
	pw.set.answered(pw, wake)
	if pw.reply == nil {
		return
	}
	pw.reply.wake(frame.AppendHostWake(nil, wake), pw.gen)
}

// answered records the stream ids pw's answer names, if pw still serves
// the set; if not, the sender never reads it, and they are looked at
// again.
func (s *waitSet) answered(pw *parkedWait, wake *frame.HostWake) {
	ids := slices.Clone(wake.StreamIDs)
	for _, b := range wake.Batches {
		ids = append(ids, b.StreamID)
	}
	s.mu.Lock()
	if s.cur == pw {
		s.woken = ids
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.again(ids, pw)
}

// remove ends pw's service of the set if it still serves it.
func (s *waitSet) remove(pw *parkedWait) {
	s.mu.Lock()
	if s.cur == pw {
		s.cur = nil
	}
	s.mu.Unlock()
}

// serveHostWait answers pw when any copy of its set has something to ask
// for (hostWakeIDs), at the end of its wait with nothing, or not at all
// when a newer host wait of the same node replaced it. Its first pass
// looks at the copies that joined or changed, or at every copy
// (waitSet.take); each later pass at the copies whose stream changed
// since, signalled, and every hostWaitGap at those whose ack is on its
// way; and at most every half wait one pass at every copy, which keeps
// the quiet copies live.
func (h *Host) serveHostWait(pw *parkedWait) {
	s := pw.set
	defer s.remove(pw)
	wait := wire.WaitUpTo(int64(pw.waitMS), maxReplWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// refresh and gap are reset on each pass (stopped ones, with Go
	// 1.23's timers, never deliver a stale tick after a Reset).
	refresh := time.NewTimer(wait)
	defer refresh.Stop()
	gap := time.NewTimer(hostWaitGap)
	gap.Stop()
	defer gap.Stop()
	first := true
	// final: the wait is over; this pass answers what it finds, or that
	// nothing changed.
	final := false
	var owners []*owner
	for {
		check, all, due, ok := s.take(pw, first, wait, time.Now())
		if !ok {
			h.endHostWait(pw)
			return
		}
		var inFlight []int
		if len(check) > 0 {
			h.parked.checked.Add(int64(len(check)))
			// The watch is in place before the owners and tails are read:
			// a role that stops or a stream that changes after the read
			// signals wake, and one that stopped before it is not found
			// (so the pass looks the owners up again after the watch is
			// set; owners looked up before it could name a role stopped in
			// between, whose change signalled no one: review R6).
			owners = h.ownedIDs.getCopies(check, owners)
			s.watchOwners(check, owners)
			owners = h.ownedIDs.getCopies(check, owners)
			req := &frame.HostWait{Node: s.node, WaitMS: pw.waitMS, Copies: check}
			var ids []uint64
			var fetch []int
			// A first pass, and a pass over every copy, also keep the
			// copies they look at live (hostWakeIDs' refresh).
			ids, fetch, inFlight = hostWakeIDs(req, owners, first || all)
			// A copy's ack in flight is counted without a change of its
			// stream: look again shortly.
			if len(inFlight) > 0 {
				again := make([]uint64, 0, len(inFlight))
				for _, i := range inFlight {
					again = append(again, check[i].StreamID)
				}
				s.again(again, pw)
			}
			if len(ids)+len(fetch) > 0 {
				limit := 0 // a sender of an earlier release: stream ids only
				if pw.records {
					limit = h.hostWakeLimit(len(check))
				}
				wake := &frame.HostWake{StreamIDs: ids}
				hostWakeRecords(wake, req, owners, fetch, limit)
				h.answerHostWait(pw, wake)
				return
			}
		}
		if final {
			h.answerHostWait(pw, &frame.HostWake{})
			return
		}
		first = false
		var tick <-chan time.Time
		if len(inFlight) > 0 {
			gap.Reset(hostWaitGap)
			tick = gap.C
		}
		// The next pass over every copy keeps them live while this wait
		// is parked (a change's first pass looks only at the copies that
		// changed): at most half a wait between two.
		refresh.Reset(time.Until(due))
		select {
		case <-pw.wake:
		case <-tick:
		case <-refresh.C:
		case <-timer.C:
			final = true
		case <-pw.end:
			h.endHostWait(pw)
			return
		}
		refresh.Stop()
		gap.Stop()
	}
}

// endHostWait ends a wait that no longer serves its set: replaced, which
// is not answered, or closed as the host stops, answered shutting_down.
func (h *Host) endHostWait(pw *parkedWait) {
	w := &h.parked
	w.mu.RLock() // closing is written under the write lock
	closing := pw.closing
	w.mu.RUnlock()
	if closing && pw.reply != nil {
		pw.reply.fail(h.stopping())
	}
}

// Bounds of the records one host wake carries (hostWakeRecords): in all,
// and for one copy, counted with what each record and each copy's entry
// take besides the records' data (at most recordOverhead and
// wakeEntryOverhead). A copy over either is woken to ask on its own.
const (
	hostWakeBytes     = 256 << 10
	hostWakeCopyBytes = 64 << 10
	// recordOverhead bounds a record's time delta and length in a batch.
	recordOverhead = binary.MaxVarintLen64 + binary.MaxVarintLen32
	// wakeEntryOverhead bounds a copy's entry in a wake besides its
	// records: its stream id and length, and the batch's header, five
	// numbers, head digest and the first offsets and counts of its runs.
	wakeEntryOverhead = 2*binary.MaxVarintLen64 + 3 + 5*binary.MaxVarintLen64 + 8 + 4*binary.MaxVarintLen64
)

// hostWakeLimit is what the records of a wake answering a host wait of n
// copies may take: hostWakeBytes, less if one NATS message carries less
// than that and the wake's stream ids (at most n, of at most ten bytes
// each) and headers.
func (h *Host) hostWakeLimit(n int) int {
	mm := h.link.maxMessage()
	if mm <= 0 {
		return hostWakeBytes
	}
	return min(hostWakeBytes, int(mm)-n*binary.MaxVarintLen64-frameHeadroom)
}

// hostWakeRecords puts into wake the records of the copies fetch names
// (indexes into req.Copies, owners[i] their owner roles, found quiet at
// the tails they name by hostWakeIDs), as the copy's own request from
// there would get them, within limit bytes in all (hostWakeLimit); a copy whose records
// do not fit or cannot be read now is named in wake.StreamIDs instead, to
// ask on its own. The copy's named record tail is its last ack the owner
// counted, whose digest the owner checked against its own there
// (serveRepl): the records continue a log that matches the owner's, which
// is what the read position's digest proves for a request. The follower
// applies them only if they start at its written tail (follower.applyWoken).
func hostWakeRecords(wake *frame.HostWake, req *frame.HostWait, owners []*owner, fetch []int, limit int) {
	budget := limit
	for _, i := range fetch {
		c := &req.Copies[i]
		if room := min(budget, hostWakeCopyBytes) - wakeEntryOverhead; room > 0 {
			if b, size := owners[i].wakeBatch(c.RecordTail, room); b != nil {
				wake.Batches = append(wake.Batches, frame.HostWakeBatch{StreamID: c.StreamID, Batch: b})
				budget -= wakeEntryOverhead + size
				continue
			}
		}
		wake.StreamIDs = append(wake.StreamIDs, c.StreamID)
	}
}

// wakeBatch is the batch a follower's request from from would be answered
// with now (replBatch, readWritten), cut to what fits in maxBytes with
// each record's encoding, and that size; nil if nothing fits or there is
// nothing to send, the epoch's begin is not yet durable, from is below
// the retained head, or the read fails (the copy then asks on its own,
// and its request meets the same condition with its own answer).
func (o *owner) wakeBatch(from uint64, maxBytes int) (*frame.Batch, int) {
	select {
	case <-o.begun:
	default:
		return nil, 0
	}
	t := o.c.Tails()
	if from < t.Head || from >= t.RecordWritten {
		return nil, 0
	}
	b := o.replBatch(t, from)
	if o.readWritten(b, t, maxBytes) != nil {
		return nil, 0
	}
	// A read returns its first record whatever its size.
	size := 0
	for i, r := range b.Records {
		if size+len(r.Data)+recordOverhead > maxBytes {
			b.Records = b.Records[:i]
			break
		}
		size += len(r.Data) + recordOverhead
	}
	if len(b.Records) == 0 {
		return nil, 0
	}
	b.Next = from + uint64(len(b.Records))
	return b, size
}

// ackInFlightWait is how long the owner host leaves asleep a copy that
// names tails past the ack it counted for it, and within what it wrote:
// the copy acked them with a standalone ack just before it went to sleep
// (follower.queueWritten), and that ack, sent through the copy's own
// ownerLink, is still on its way while the host wait that followed it,
// sent through its host's hostLink (the link does not order the two), has
// come. Waking the copy at once made it ask on its
// own and long-poll for a whole idle wait, after nearly every wake that
// carried records and every first record of a new role. A parked host
// wait looks at such copies again every hostWaitGap (a record appended
// meanwhile reaches the copy up to that much later). The wait is counted
// per copy, from the first host wait that named its tails past the ack
// (confirmer.ackBelow), across the host waits that replace one another as
// copies join: an ack really lost (a replaced connection, a failed
// publish, a refused digest) wakes the copy after it, and its own request
// carries the ack again. (Counted per host wait, a lost ack left the copy
// asleep for as long as other copies kept joining: review.)
const ackInFlightWait = time.Second

// hostWakeIDs returns the stream ids of req's copies that have something
// to ask for on their own: the copy's stream is not owned here at its
// epoch with its node as a follower (its own request learns stale_epoch or
// not_found), or its tails are not the owner's written ones (the owner has
// records or cursor events past them, or they are off the owner's), or the
// owner's retained head is not the one the copy knows (its own request
// brings the new head, and the copy trims what the owner no longer keeps),
// or the tails it names are not the ack the owner counted for it last (its
// standalone ack was lost: its own request carries the ack again). A copy
// naming tails past its counted ack, within what the owner wrote, has its
// ack on its way: it is left asleep (inFlight lists it), for at most
// ackInFlightWait from the first host wait that named those tails (a wait
// that ends meanwhile answers without it, and the next takes it up). Of
// the copies woken,
// it returns apart (fetch, indexes into req.Copies) those whose only
// difference is records the owner wrote past their tails: the host wake
// can carry those records (hostWakeRecords).
// owners[i] is the owner role running here of req.Copies[i]'s stream, or
// nil. With refresh, each copy at its owner's epoch naming the tails it
// last acked stays live (owner.hostWaitQuiet): a copy asleep on a host
// wait is live (for retention and a graceful shutdown's settling) as long
// as it names the tails it last acked. One owner lock per copy (issue 17:
// three before, with the liveness pass).
func hostWakeIDs(req *frame.HostWait, owners []*owner, refresh bool) (ids []uint64, fetch, inFlight []int) {
	now := time.Now()
	for i := range req.Copies {
		c := &req.Copies[i]
		o := owners[i]
		if o == nil || o.epoch != c.Epoch {
			ids = append(ids, c.StreamID)
			continue
		}
		quiet, aheadSince := o.hostWaitQuiet(req.Node, c.RecordTail, c.CursorTail, refresh, now)
		t := o.c.Tails()
		if !quiet {
			if !aheadSince.IsZero() && now.Sub(aheadSince) < ackInFlightWait &&
				c.RecordTail <= t.RecordWritten && c.CursorTail <= t.CursorWritten {
				inFlight = append(inFlight, i)
			} else {
				ids = append(ids, c.StreamID)
			}
			continue
		}
		switch {
		case c.CursorTail < t.CursorDurable || c.CursorTail > t.CursorWritten || c.KnownHead != t.Head ||
			c.RecordTail < t.Head || c.RecordTail > t.RecordWritten:
			ids = append(ids, c.StreamID)
		case c.RecordTail < t.RecordWritten:
			fetch = append(fetch, i) // only records to send
		}
	}
	return ids, fetch, inFlight
}

// hostWaitQuiet reports whether node follows this copy and its counted ack
// is at exactly these tails (quiet), or, when it is below them, since when
// host waits have named tails past it (aheadSince: an ack on its way,
// confirmer.ackBelow; zero otherwise), under one lock; with refresh it
// also refreshes that ack's time (confirmer.stillAt) when quiet (a copy
// asleep on a host wait stays live). The caller checked the copy's epoch.
func (o *owner) hostWaitQuiet(node string, record, cursor uint64, refresh bool, now time.Time) (quiet bool, aheadSince time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.mu.conf.isFollower(node) {
		return false, time.Time{}
	}
	if refresh {
		o.mu.conf.stillAt(node, record, cursor, now)
	}
	if o.mu.conf.ackedAt(node, record, cursor) {
		return true, time.Time{}
	}
	_, aheadSince = o.mu.conf.ackBelow(node, record, cursor, now)
	return false, aheadSince
}

// changed marks dirty the copies of stream in every set that watches it,
// and wakes the wait serving the set. The store calls it with the copy's
// lock held (streamlog.Options.OnChange), so it never waits: while start's
// goroutine runs it hands stream to it (markQueue) and returns; without
// it (a host that does not run, in tests) it marks the sets itself,
// taking hostWaiters.mu (shared) and each set's mu, which nothing holding
// them takes a copy's lock under.
func (w *hostWaiters) changed(stream string) {
	if w.n.Load() == 0 {
		return
	}
	if q := w.marks.Load(); q != nil {
		select {
		case q.streams <- stream:
		default:
			w.overflows.Add(1)
			q.overflow.Store(true)
			select {
			case q.kick <- struct{}{}:
			default:
			}
		}
		return
	}
	w.mark([]string{stream}, false)
}

// mark marks streams dirty in every set that watches them, or every
// watched copy with all, and wakes the waits serving the sets.
func (w *hostWaiters) mark(streams []string, all bool) {
	w.mu.RLock()
	for _, s := range w.sets {
		s.changed(streams, all)
	}
	w.mu.RUnlock()
}

// start has the store's changes marked by a goroutine of their own (see
// markQueue) until close.
func (w *hostWaiters) start() {
	q := &markQueue{streams: make(chan string, markQueueLen), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if !w.marks.CompareAndSwap(nil, q) {
		return
	}
	go w.markLoop(q)
}

// markLoop marks the changes q carries, up to markBatch under one hold of
// the locks, until q stops.
func (w *hostWaiters) markLoop(q *markQueue) {
	defer close(q.done)
	batch := make([]string, 0, markBatch)
	for {
		batch = batch[:0]
		select {
		case stream := <-q.streams:
			batch = append(batch, stream)
		case <-q.kick: // overflow set: mark everything below
		case <-q.stop:
			return
		}
	more:
		for len(batch) < markBatch {
			select {
			case stream := <-q.streams:
				batch = append(batch, stream)
			default:
				break more
			}
		}
		w.mark(batch, q.overflow.Swap(false))
	}
}

func (s *waitSet) changed(streams []string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	marked := false
	if all {
		for _, id := range s.watch {
			s.dirty[id] = struct{}{}
			marked = true
		}
	} else {
		for _, stream := range streams {
			if id, ok := s.watch[stream]; ok {
				s.dirty[id] = struct{}{}
				marked = true
			}
		}
	}
	if marked && s.cur != nil {
		select {
		case s.cur.wake <- struct{}{}:
		default:
		}
	}
}

// close answers every parked wait shutting_down, forgets the sets and
// refuses new host waits.
func (w *hostWaiters) close() {
	// The sets go first (n is 0 when w.mu is given back), so that no
	// change takes the synchronous path and waits for w.mu; then the
	// marking goroutine stops.
	defer func() {
		if q := w.marks.Swap(nil); q != nil {
			close(q.stop)
			<-q.done
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for node, s := range w.sets {
		s.mu.Lock()
		if pw := s.cur; pw != nil {
			pw.closing = true
			close(pw.end)
			s.cur = nil
		}
		s.mu.Unlock()
		delete(w.sets, node)
	}
	w.n.Store(0)
}

// ownerIndex finds the owner role running here by stream id, for the host
// waits.
type ownerIndex struct {
	mu sync.Mutex
	m  map[uint64]*owner
}

func (x *ownerIndex) put(o *owner) {
	x.mu.Lock()
	if x.m == nil {
		x.m = map[uint64]*owner{}
	}
	x.m[o.id] = o
	x.mu.Unlock()
}

// remove forgets o if it is still the owner indexed under its id.
func (x *ownerIndex) remove(o *owner) {
	x.mu.Lock()
	if x.m[o.id] == o {
		delete(x.m, o.id)
	}
	x.mu.Unlock()
}

// getCopies returns the owner indexed under each copy's stream id (nil
// for none), in dst when it is long enough: one lock for a host wait's
// whole set.
func (x *ownerIndex) getCopies(copies []frame.HostWaitCopy, dst []*owner) []*owner {
	if cap(dst) < len(copies) {
		dst = make([]*owner, len(copies))
	}
	dst = dst[:len(copies)]
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range copies {
		dst[i] = x.m[copies[i].StreamID]
	}
	return dst
}

func (x *ownerIndex) get(id uint64) *owner {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.m[id]
}
