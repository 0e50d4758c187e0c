package host

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// hostWaiters is the owner host's side: at most one parked host wait per
// follower node; a newer one replaces the older, which ends unanswered.
type hostWaiters struct {
	mu     sync.RWMutex
	closed bool
	parked map[string]*parkedWait // by follower node
	n      atomic.Int32           // len(parked), read without mu by changed
}

// parkedWait is one follower host's host wait at this owner host.
type parkedWait struct {
	reply string
	req   *frame.HostWait
	// watch names the streams whose change may answer the wait (set under
	// hostWaiters.mu before the tails are first checked).
	watch map[string]struct{}
	wake  chan struct{} // buffered 1: a watched stream changed
	end   chan struct{} // closed when replaced or closed
	// closing says the host stops (under hostWaiters.mu): the wait is
	// answered shutting_down, not dropped.
	closing bool
	// records says the sender takes records in the wake
	// (frame.HeaderWakeRecords).
	records bool
}

// onHostWait is the host-pair subject's callback. It parks the request
// (replacing the sender's older one, in the order they arrived) and serves
// it in a goroutine of the host's request group within the replication
// budget.
func (h *Host) onHostWait(m *nats.Msg) {
	h.metrics.replReceived(replKindHostWait)
	req, err := frame.DecodeHostWait(m.Data)
	if err != nil {
		h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "host wait: %v", err))
		return
	}
	// As on the replication subjects, the last token is the sender: with
	// credentials a host publishes only its own, so a body naming another
	// node is a host speaking for another.
	if node := wire.ReplicationNode(m.Subject); req.Node != node {
		h.log.Warn("host wait names another node than its subject; refused", "subject_node", node, "body_node", req.Node)
		h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "host wait on node %s's subject names node %s", node, req.Node))
		return
	}
	if !h.replReqs.take() {
		h.refuse(m.Reply, h.replReqs)
		return
	}
	pw := &parkedWait{reply: m.Reply, req: req, wake: make(chan struct{}, 1), end: make(chan struct{}),
		records: m.Header.Get(frame.HeaderWakeRecords) != ""}
	w := &h.parked
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		h.replReqs.give()
		h.replyErr(m.Reply, h.stopping())
		return
	}
	if old := w.parked[req.Node]; old != nil {
		close(old.end)
	}
	if w.parked == nil {
		w.parked = map[string]*parkedWait{}
	}
	w.parked[req.Node] = pw
	w.n.Store(int32(len(w.parked)))
	w.mu.Unlock()
	if !h.reqs.Go(func() {
		defer h.replReqs.give()
		h.serveHostWait(pw)
	}) {
		h.replReqs.give()
		w.remove(req.Node, pw)
		h.replyErr(m.Reply, h.stopping())
	}
}

// hostWaitWatch is the set of streams whose change may answer req: those
// of the copies it names that this host owns now. It returns no owner, so
// that no pass can use an owner looked up before the watch was set.
func (h *Host) hostWaitWatch(req *frame.HostWait) map[string]struct{} {
	watch := make(map[string]struct{}, len(req.Copies))
	for _, o := range h.ownedIDs.getCopies(req.Copies, nil) {
		if o != nil {
			watch[o.stream] = struct{}{}
		}
	}
	return watch
}

// serveHostWait answers pw when any of its copies has something to ask
// for (hostWakeIDs), at the end of its wait with nothing, or not at all
// when a newer host wait of the same node replaced it. It looks at every
// copy at the start, after each change signalled and at the end, and at
// the copies whose ack is on its way every hostWaitGap.
func (h *Host) serveHostWait(pw *parkedWait) {
	w := &h.parked
	defer w.remove(pw.req.Node, pw)
	watch := h.hostWaitWatch(pw.req)
	// The watch is in place before the owners and tails are read: a role
	// that stops or a stream that changes after the read signals wake, and
	// one that stopped before it is not found (so every pass, the first
	// too, looks the owners up again after the watch is set; owners looked
	// up before it could name a role stopped in between, whose change
	// signalled no one: review R6).
	w.mu.Lock()
	pw.watch = watch
	w.mu.Unlock()
	wait := wire.WaitUpTo(int64(pw.req.WaitMS), maxReplWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// The first pass also keeps the copies live (hostWakeIDs' refresh).
	refresh := true
	// final: the wait is over; this pass answers what it finds, or that
	// nothing changed.
	final := false
	// pending: the copies whose ack was in flight at the last pass. A
	// recheck (a pass without a change signalled) looks at these only:
	// nothing else changed unsignalled, and a pass over every copy per
	// copy joining the set (its resend's first pass, then the recheck)
	// is what makes joining cost in proportion to the set (issue 17).
	var pending []frame.HostWaitCopy
	recheck := false
	var owners []*owner
	for {
		req := pw.req
		if recheck {
			req = &frame.HostWait{Node: pw.req.Node, WaitMS: pw.req.WaitMS, Copies: pending}
		}
		owners = h.ownedIDs.getCopies(req.Copies, owners)
		ids, fetch, inFlight := hostWakeIDs(req, owners, refresh)
		if len(ids)+len(fetch) > 0 {
			limit := 0 // a sender of an earlier release: stream ids only
			if pw.records {
				limit = h.hostWakeLimit(len(pw.req.Copies))
			}
			wake := &frame.HostWake{StreamIDs: ids}
			hostWakeRecords(wake, req, owners, fetch, limit)
			h.replyData(pw.reply, frame.AppendHostWake(nil, wake))
			return
		}
		if final {
			h.replyData(pw.reply, frame.AppendHostWake(nil, &frame.HostWake{}))
			return
		}
		refresh = false
		// A copy's ack in flight is counted without a change of its
		// stream: look again shortly.
		next := make([]frame.HostWaitCopy, 0, len(inFlight))
		for _, i := range inFlight {
			next = append(next, req.Copies[i])
		}
		pending, recheck = next, false
		var tick <-chan time.Time
		if len(pending) > 0 {
			tick = time.After(hostWaitGap)
		}
		select {
		case <-pw.wake:
		case <-tick:
			recheck = true
		case <-timer.C:
			final = true
		case <-pw.end:
			w.mu.Lock()
			closing := pw.closing
			w.mu.Unlock()
			if closing {
				h.replyErr(pw.reply, h.stopping())
			}
			return
		}
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
	return min(hostWakeBytes, int(h.nc.MaxPayload())-n*binary.MaxVarintLen64-frameHeadroom)
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
// (follower.queueWritten), and that ack, on the copy's replication
// subject, is still on its way while the host wait that followed it, on
// another subject, has come. Waking the copy at once made it ask on its
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

// changed wakes the parked host waits that watch stream. The store calls it
// with the copy's lock held (streamlog.Options.OnChange): it takes only
// hostWaiters.mu, and nothing holding that takes a copy's lock.
func (w *hostWaiters) changed(stream string) {
	if w.n.Load() == 0 {
		return
	}
	// Every append of the host comes here: shared, so appends of
	// different streams do not queue on one another (a wake is a send
	// that never blocks, and watch is written only under the lock).
	w.mu.RLock()
	for _, pw := range w.parked {
		if _, ok := pw.watch[stream]; ok {
			select {
			case pw.wake <- struct{}{}:
			default:
			}
		}
	}
	w.mu.RUnlock()
}

// remove forgets node's parked wait if it is still pw.
func (w *hostWaiters) remove(node string, pw *parkedWait) {
	w.mu.Lock()
	if w.parked[node] == pw {
		delete(w.parked, node)
		w.n.Store(int32(len(w.parked)))
	}
	w.mu.Unlock()
}

// close answers every parked wait shutting_down and refuses new ones.
func (w *hostWaiters) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for node, pw := range w.parked {
		pw.closing = true
		close(pw.end)
		delete(w.parked, node)
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
