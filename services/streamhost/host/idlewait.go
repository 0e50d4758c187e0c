package host

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// One long poll per pair of hosts (issue 17). A follower copy whose last
// replication request, of the whole idle wait, came back empty, or came
// back empty to a copy with no records for a whole idle wait, or brought
// records on a stream not busy (follower.run), does not ask again on its
// own: it registers with the
// host's idle waits for its owner's node and sleeps.
// Per owner node one goroutine of the follower host sends the owner host
// one host wait (frame.HostWait, through the link's hostLink) naming every
// copy sleeping there with its durable tails (what it acked last), and
// once the owner host holds that set (hostwait.go, waitSet), host wait
// changes naming only the copies that joined or left it since; the
// owner host parks it and answers (frame.HostWake) at once with the
// copies that have something to ask for, or as soon as one of them
// changes, or with nothing at the end of the wait. The copies named wake
// and ask on their own (their ownerLink) as before; a failure of the
// host wait wakes every copy registered for that owner, so an owner's
// loss is noticed by the per-copy requests as without it, but one that is
// only late, or refused overloaded, is sent again (hostWaitLateMax).
// A copy that is only behind by records the owner wrote gets them in the
// host wake itself (hostWakeRecords), applies them, acks them with its
// standalone ack and, unless its stream is busy (records came to it twice
// in the idle wait before them), sleeps again (follower.applyWoken): one
// publish to an idle stream costs each follower copy one message of its
// own, where a woken copy's request, its reply and the long polls that
// followed until it slept again were ten (issue 17). A copy of a busy
// stream keeps its own long poll. The same rule holds for records from a
// copy's own request, without cursor events, that reach the owner's
// durable tail: a new stream's first record, a new follower role's first
// records after a failover; the copy sleeps once it has sent their ack.
// Acks and confirms stay on the per-copy path; a host wait that names
// tails whose ack is still on its way does not wake the copy for up to
// ackInFlightWait, counted per copy.

const (
	// hostWaitGap is the least time between two host waits of one pair
	// of hosts.
	hostWaitGap = 20 * time.Millisecond
	// hostWaitGather is the least time between a host wait and its resend
	// with copies that turned idle while it was in flight. A copy joining
	// has the one in flight cancelled and resent with it, at once when
	// that one went out this long ago or more, else when it has been out
	// this long: copies turning idle one after another are gathered into
	// one resend per gather time, not one each. The owner answers the
	// resend at once if a joining copy has something to ask for by then,
	// so such a copy waits at most the gather time and a round trip
	// unnoticed, never a whole idle wait.
	hostWaitGather = 100 * time.Millisecond
	// hostWaitRetry is the least time between host waits after one
	// failed: the failure woke every copy, so only copies whose own
	// request came back empty since will be in the next one.
	hostWaitRetry = backoffMax
	// hostWaitLateMax host waits in a row unanswered within their wait
	// and the slack wake the copies; fewer are sent again for the same
	// copies, which sleep on. An answer that is late is a slow owner host
	// or a slow NATS, not a lost owner: an owner host that is gone leaves
	// no responders, which wakes the copies at once. Waking every copy on
	// the first late answer turned a moment of latency (the first seconds
	// of a mass failover) into a storm of per-copy requests, thousands per
	// host at 10,000 streams (issue 17), which kept the latency up: every
	// copy's long poll timed out in turn, and none got back to sleep. An
	// overloaded refusal likewise wakes no copy.
	hostWaitLateMax = 3
)

var errSetGrew = errors.New("a copy joined the idle set")

// idleCopy is one sleeping follower copy.
type idleCopy struct {
	c     frame.HostWaitCopy
	woken chan struct{} // closed when it is to wake
	// batch is the records its owner host's wake carried for it, if any
	// (set before woken is closed): the copy applies them instead of
	// asking.
	batch *frame.Batch
}

// idleWaits is the follower host's side: the copies sleeping per owner
// node and one goroutine per owner node with any.
type idleWaits struct {
	mu    sync.Mutex
	peers map[string]*peerWait // by owner node
	wg    sync.WaitGroup       // the peers' goroutines
}

// peerWait is the idle set of one owner node (idleWaits.mu guards it).
type peerWait struct {
	owner  string
	copies map[uint64]*idleCopy // by stream id
	size   int                  // the encoded size of the copies' entries
	// changed are the stream ids of the copies that joined or left since
	// the last host wait sent. With deltas, the next host wait names only
	// those (frame.HostWaitChange, based on gen, the last one sent): the
	// owner host's last answer carried gen (frame.HeaderHostWaitGen), so
	// it holds the set. Otherwise it names every copy, as generation
	// gen+1. A change the owner host cannot base on what it holds is
	// answered without the header, and the whole set goes next (issue 17:
	// a copy joining cost a resend of the whole set).
	changed map[uint64]struct{}
	gen     uint64
	deltas  bool
	// cancel ends the host wait in flight (nil when none) with its cause.
	cancel context.CancelCauseFunc
	sent   time.Time // when the host wait in flight went out
	// resend says a resend of the one in flight is due (p.grew).
	resend bool
}

// grew has the host wait in flight, if any, resent with the copies that
// joined since, at once or when it has been out hostWaitGather. Under
// idleWaits.mu.
func (p *peerWait) grew() {
	if p.cancel == nil || p.resend {
		return
	}
	p.resend = true
	cancel := p.cancel
	if d := hostWaitGather - time.Since(p.sent); d > 0 {
		// A no-op if the host wait has ended by then: the next one, sent
		// after the copies joined, names them.
		time.AfterFunc(d, func() { cancel(errSetGrew) })
		return
	}
	cancel(errSetGrew)
}

// sleepIdle parks an idle follower copy until its owner host's answer
// names it or carries records for it (returned), the host wait fails, or
// ctx ends; it returns false only when ctx ended. A copy that does not fit
// its owner's set (frame.MaxHostWaitBytes) returns at once and asks on its
// own.
func (h *Host) sleepIdle(ctx context.Context, owner string, c frame.HostWaitCopy) (*frame.Batch, bool) {
	w := &h.idle
	ic := &idleCopy{c: c, woken: make(chan struct{})}
	w.mu.Lock()
	if ctx.Err() != nil {
		w.mu.Unlock()
		return nil, false
	}
	p := w.peers[owner]
	if p == nil {
		// Generations start from the clock, so that a whole set of an
		// earlier peerWait (or process) arriving late never matches the
		// chain of this one (review: both counted from 0, and the late
		// set was taken for the current one).
		p = &peerWait{owner: owner, copies: map[uint64]*idleCopy{}, changed: map[uint64]struct{}{}, gen: uint64(time.Now().UnixNano())}
		if w.peers == nil {
			w.peers = map[string]*peerWait{}
		}
		w.peers[owner] = p
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			h.hostWaitLoop(p)
		}()
	}
	if p.size+c.Size() > frame.MaxHostWaitBytes-frame.HostWaitHeaderMax {
		w.mu.Unlock()
		return nil, true
	}
	if old := p.copies[c.StreamID]; old != nil {
		// A copy of a role that is ending (its context is done, and its
		// sleepIdle has not yet removed it): it wakes, to end.
		p.remove(old)
		close(old.woken)
	}
	p.copies[c.StreamID] = ic
	p.size += c.Size()
	p.changed[c.StreamID] = struct{}{}
	p.grew()
	w.mu.Unlock()
	select {
	case <-ic.woken:
		// Written before woken was closed, under w.mu.
		return ic.batch, true
	case <-ctx.Done():
		w.mu.Lock()
		if p.copies[c.StreamID] == ic {
			p.remove(ic)
		}
		w.mu.Unlock()
		return nil, false
	}
}

// hostWaitLoop sends p's owner host one host wait at a time for p's copies
// while there are any, and wakes the copies the answers name (all of them
// when a host wait fails). It ends when p has no copies or the host stops.
func (h *Host) hostWaitLoop(p *peerWait) {
	w := &h.idle
	to := h.link.toHost(p.owner)
	wait := h.cfg.ReplIdleWait
	log := h.log.With("owner_node", p.owner)
	var last time.Time
	gap := hostWaitGap
	late := 0 // host waits in a row that went unanswered (hostWaitLateMax)
	for {
		if d := gap - time.Since(last); d > 0 {
			select {
			case <-h.bgCtx.Done():
			case <-time.After(d):
			}
		}
		w.mu.Lock()
		if len(p.copies) == 0 || h.bgCtx.Err() != nil {
			if w.peers[p.owner] == p {
				delete(w.peers, p.owner)
			}
			for _, ic := range p.copies {
				close(ic.woken)
			}
			clear(p.copies)
			w.mu.Unlock()
			return
		}
		hw := p.hostWait(h.cfg.Node, uint32(wait/time.Millisecond))
		hw.records = true
		gen := strconv.FormatUint(p.gen, 10)
		rctx, cancel := context.WithCancelCause(h.bgCtx)
		last = time.Now()
		p.cancel, p.sent, p.resend = cancel, last, false
		w.mu.Unlock()

		// The owner answers within the wait; a longer silence means it is
		// gone, and a lost link loses the request and its answer.
		resp, err := to.wait(rctx, hw, replTimeout(wait))
		cause := context.Cause(rctx)
		cancel(nil)
		w.mu.Lock()
		p.cancel = nil
		w.mu.Unlock()
		gap = hostWaitGap
		if err != nil {
			switch hostWaitFailure(h.bgCtx.Err() != nil, err, cause, late) {
			case hostWaitStop, hostWaitRegrown:
				// Stopping; or cancelled for the copies that joined: ask
				// again at once (after the gap) with the new set.
			case hostWaitLate:
				// Late, not lost (hostWaitLateMax): ask again for the same
				// copies, which sleep on.
				late++
				log.Debug("host wait unanswered within its wait; asking again", "err", err, "late", late)
			default:
				log.Debug("host wait failed; waking the idle copies", "err", err, "cause", cause, "late", late)
				h.wakeIdle(p, nil)
				late, gap = 0, hostWaitRetry
			}
			continue
		}
		late = 0
		if code := resp.code; code != "" {
			// An error leaves deltas as it was: an owner host that refused
			// the host wait after applying it holds its set; one that did
			// not refuses the next change, and asks for the whole set. But
			// bad_request may be an owner host of an earlier release,
			// which cannot read a change: the whole set goes next.
			if code == wire.CodeBadRequest {
				w.mu.Lock()
				p.deltas = false
				w.mu.Unlock()
			}
			refusal := wire.DecodeErrorReply(code, resp.data)
			gap = hostWaitRetry
			if code == wire.CodeOverloaded {
				// The owner host is there and busy: more requests (every
				// copy's own) would only add to it.
				log.Debug("host wait refused; asking again", "code", code, "reply", refusal)
				continue
			}
			log.Debug("host wait refused; waking the idle copies", "code", code, "reply", refusal)
			h.wakeIdle(p, nil)
			continue
		}
		wake, err := frame.DecodeHostWake(resp.data)
		w.mu.Lock()
		p.deltas = err == nil && resp.gen == gen
		w.mu.Unlock()
		if err != nil {
			log.Warn("bad host wake; waking the idle copies", "err", err)
			h.wakeIdle(p, nil)
			gap = hostWaitRetry
			continue
		}
		if len(wake.StreamIDs)+len(wake.Batches) > 0 {
			ids := make(map[uint64]*frame.Batch, len(wake.StreamIDs)+len(wake.Batches))
			for _, id := range wake.StreamIDs {
				ids[id] = nil
			}
			for _, b := range wake.Batches {
				ids[b.StreamID] = b.Batch
			}
			h.wakeIdle(p, ids)
		}
	}
}

// wakeIdle wakes p's copies of the streams ids names, with the records
// it maps them to if any, or all of them when ids is nil. Records are for
// the copy at the epoch they name (follower.applyWoken checks it).
func (h *Host) wakeIdle(p *peerWait, ids map[uint64]*frame.Batch) {
	w := &h.idle
	w.mu.Lock()
	defer w.mu.Unlock()
	wake := func(ic *idleCopy, b *frame.Batch) {
		p.remove(ic)
		ic.batch = b
		close(ic.woken)
	}
	if ids == nil {
		for _, ic := range p.copies {
			wake(ic, nil)
		}
		return
	}
	// By the ids named: a wake costs what it names, not the set.
	for id, b := range ids {
		if ic := p.copies[id]; ic != nil {
			wake(ic, b)
		}
	}
}

// remove takes ic out of p's set. Under idleWaits.mu.
func (p *peerWait) remove(ic *idleCopy) {
	delete(p.copies, ic.c.StreamID)
	p.size -= ic.c.Size()
	p.changed[ic.c.StreamID] = struct{}{}
}

// hostWait is p's next host wait, of generation p.gen+1: the copies that
// joined or left since the last one sent, based on it, with deltas;
// otherwise every copy, with the generation. Under idleWaits.mu.
func (p *peerWait) hostWait(node string, waitMS uint32) hostWaitMsg {
	p.gen++
	if p.deltas {
		c := frame.HostWaitChange{Node: node, WaitMS: waitMS, Base: p.gen - 1, Gen: p.gen}
		for id := range p.changed {
			if ic := p.copies[id]; ic != nil {
				c.Copies = append(c.Copies, ic.c)
			} else {
				c.Left = append(c.Left, id)
			}
			// Not clear: its cost is the map's size, and it held every
			// copy once all were woken.
			delete(p.changed, id)
		}
		return hostWaitMsg{data: frame.AppendHostWaitChange(nil, &c)}
	}
	p.changed = map[uint64]struct{}{}
	req := frame.HostWait{Node: node, WaitMS: waitMS, Copies: make([]frame.HostWaitCopy, 0, len(p.copies))}
	for _, ic := range p.copies {
		req.Copies = append(req.Copies, ic.c)
	}
	return hostWaitMsg{data: frame.AppendHostWait(nil, &req), gen: strconv.FormatUint(p.gen, 10)}
}

// What a failed host wait leads to (hostWaitFailure).
const (
	hostWaitWake    = iota // wake every idle copy of the owner host
	hostWaitStop           // the host stops: nothing to do
	hostWaitRegrown        // cancelled for copies that joined: ask again with them
	hostWaitLate           // only late: ask again for the same copies
)

// hostWaitFailure decides what a host wait that ended with err (its
// request context's cause, late host waits before it in a row) leads to.
// Only a request that ended cancelled was cancelled for the copies that
// joined: one joining just after a real failure must not hide it. A
// request that ran out its time is late, not lost (hostWaitLateMax), even
// when copies joined between its deadline and the look at its cause: a
// join cancels a request already ended too, and that must not turn a late
// answer into a wake of every copy. A lost link (errLinkLost), nobody
// serving (errNoServer) and any other error wake every copy.
func hostWaitFailure(stopping bool, err, cause error, late int) int {
	switch {
	case stopping:
		return hostWaitStop
	case errors.Is(err, context.Canceled) && errors.Is(cause, errSetGrew):
		return hostWaitRegrown
	case errors.Is(err, context.DeadlineExceeded) && late+1 < hostWaitLateMax:
		return hostWaitLate
	}
	return hostWaitWake
}
