package host

import (
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// confirmer is an owner's confirm bookkeeping with no I/O and no lock of
// its own: the publishes waiting for their record to be confirmed, what
// each follower acked, the owner's own durable tail, the watermark those
// give, and the deadlines of the waiting publishes. Its methods take what
// happened (records appended and durable at the owner, a follower's ack,
// the time) and return the replies that releases; the owner calls them
// under its lock and sends the replies after it (owner.send), as raft's
// Ready hands its caller what to send.
//
// A record is confirmed once W copies hold it durably, the owner's own
// durable tail always one of them: with replication overlapping the
// owner's fsync a follower may hold a record before the owner does, and
// followers alone never confirm (confirmedWatermark).
type confirmer struct {
	// What replies say.
	stream    string
	id, epoch uint64
	timeout   time.Duration // ConfirmTimeout: a waiter's deadline is its start plus it

	followers []string
	w         int
	// copies is how many copies the assignment holds and minCopies the
	// stream's floor (0: none). Below the floor (wire.BelowFloor) nothing
	// is confirmed: every waiting publish is refused not_enough_copies.
	copies, minCopies int
	acks              map[string]followerAck

	tail      uint64 // the owner's durable record tail
	watermark uint64 // confirmed: every record below is on >= W copies, the owner's included

	pending []*waiter // appended, waiting for W; offsets and deadlines ascending
	dups    []*waiter // repeats waiting for their first write's confirm
	// failCode, once set, fails every waiter at once with it.
	failCode string
}

// followerAck is what a follower last said it holds.
type followerAck struct {
	record, cursor uint64
	at             time.Time
	// aheadSince is when a host wait first named tails of the follower's
	// copy past this ack (its next ack on its way, ackBelow); zero when
	// none has since the ack moved.
	aheadSince time.Time
}

// waiter is a publish waiting for its record to be confirmed.
type waiter struct {
	reply    string
	offset   uint64
	deadline time.Time
	dup      bool
	// batch is the publish batch this waiter answers for (pubbatch.go):
	// offset is then its highest record offset.
	batch *pubBatchReq
}

// outgoing is a reply prepared under the lock and sent after it.
type outgoing struct {
	to   string
	ok   *wire.PublishConfirm
	pub  *pubBatchOut // a publish batch's confirm (pubbatch.go)
	fail *wire.Error
	// start is when the append that wrote a confirmed record began (the
	// confirm latency's start).
	start time.Time
}

func newConfirmer(stream string, id, epoch uint64, timeout time.Duration, tail uint64) confirmer {
	return confirmer{stream: stream, id: id, epoch: epoch, timeout: timeout, tail: tail, acks: make(map[string]followerAck)}
}

// setAssignment takes the followers of an assignment whose owner is owner
// (the owner itself and repeats are dropped), its W and the stream's floor
// minCopies. Acks of nodes that no longer follow are forgotten.
func (c *confirmer) setAssignment(owner string, followers []string, w, minCopies int) {
	c.followers = c.followers[:0]
	for _, f := range followers {
		if f != owner && !slices.Contains(c.followers, f) {
			c.followers = append(c.followers, f)
		}
	}
	for n := range c.acks {
		if !slices.Contains(c.followers, n) {
			delete(c.acks, n)
		}
	}
	c.w = w
	c.copies, c.minCopies = 1+len(c.followers), minCopies
}

// short reports whether the assignment is below the stream's floor.
func (c *confirmer) short() bool { return wire.BelowFloor(c.copies, c.minCopies) }

// floorError is the refusal of a publish below the floor.
func (c *confirmer) floorError() *wire.Error {
	copies := "copies"
	if c.copies == 1 {
		copies = "copy"
	}
	return wire.Errorf(wire.CodeNotEnoughCopies,
		"stream %s: the assignment at epoch %d holds %d %s, fewer than the stream's min_copies %d; not confirmed, retry once copies are added",
		c.stream, c.epoch, c.copies, copies, c.minCopies)
}

// isFollower reports whether node follows in the assignment.
func (c *confirmer) isFollower(node string) bool { return slices.Contains(c.followers, node) }

// durable records that the owner's own records below tail are durable.
func (c *confirmer) durable(tail uint64) { c.tail = max(c.tail, tail) }

// acked records what follower node says it holds durably, at time at. A
// follower may hold records the owner has written but not yet made
// durable; an ack of a node that does not follow is ignored. Acks only
// move forward: a follower's durable tails do not go back within an epoch,
// and its standalone acks and long polls may be served out of order (a
// poll carrying an older tail answered after the standalone ack of a newer
// one), so an older ack says nothing new.
func (c *confirmer) acked(node string, record, cursor uint64, at time.Time) {
	if !c.isFollower(node) {
		return
	}
	prev := c.acks[node]
	a := followerAck{record: max(prev.record, record), cursor: max(prev.cursor, cursor), at: at}
	if a.record == prev.record && a.cursor == prev.cursor {
		a.aheadSince = prev.aheadSince // nothing new: the ack on its way is still to come
	}
	c.acks[node] = a
}

// stillAt refreshes node's ack time when node names the tails it acked
// last: a follower copy asleep on a host wait (idlewait.go) stays live
// without asking on its own. It acks nothing new: the host wait carries no
// tail digest, so only a tail already acked on the per-copy path counts.
func (c *confirmer) stillAt(node string, record, cursor uint64, at time.Time) {
	if a := c.acks[node]; c.ackedAt(node, record, cursor) && at.After(a.at) {
		a.at = at
		c.acks[node] = a
	}
}

// ackedAt reports whether node's last counted ack is at exactly these
// tails. A copy asleep on a host wait naming other tails has an ack the
// owner never counted (a standalone ack lost on the way): it is woken, and
// its own request carries the ack again, with its digest.
func (c *confirmer) ackedAt(node string, record, cursor uint64) bool {
	a, ok := c.acks[node]
	return ok && a.record == record && a.cursor == cursor
}

// ackBelow reports whether node's counted ack is below these tails: a
// copy asleep on a host wait naming them sent an ack the owner has not
// counted yet, on its way on its replication subject (hostWakeIDs), or
// lost. since is when a host wait first named tails past that ack (now,
// the first time), so that the wait for it is bounded per copy, across
// host waits that replace one another (ackInFlightWait). A follower with
// no ack counted is not taken to have one on its way.
func (c *confirmer) ackBelow(node string, record, cursor uint64, now time.Time) (below bool, since time.Time) {
	a, ok := c.acks[node]
	if !ok || a.record > record || a.cursor > cursor || a.record == record && a.cursor == cursor {
		return false, time.Time{}
	}
	if a.aheadSince.IsZero() {
		a.aheadSince = now
		c.acks[node] = a
	}
	return true, a.aheadSince
}

// wait adds a publish waiting for its record: a first write (offsets
// ascending, as appended) or a repeat of an earlier one.
func (c *confirmer) wait(w *waiter) {
	if w.dup {
		c.dups = append(c.dups, w)
	} else {
		c.pending = append(c.pending, w)
	}
}

// waiting counts the publishes waiting for a confirm.
func (c *confirmer) waiting() int { return len(c.pending) + len(c.dups) }

// followerTails returns each follower's acked tail (0 for one that has
// not asked yet), in the assignment's order.
func (c *confirmer) followerTails() []uint64 {
	t := make([]uint64, len(c.followers))
	for i, f := range c.followers {
		t[i] = c.acks[f].record
	}
	return t
}

// confirmedWatermark is the watermark when the owner's durable tail is
// owner and the followers acked followers: the highest offset below which
// W copies hold every record, the owner one of them. The owner counts as
// one copy up to its own durable tail, however far the followers are
// ahead of it; the W-1 others are the (W-1)-th highest follower tail.
// Fewer than W copies in all confirm nothing.
func confirmedWatermark(owner uint64, followers []uint64, w int) uint64 {
	switch {
	case w < 1 || w > 1+len(followers):
		return 0
	case w == 1:
		return owner
	}
	return min(owner, wthHighest(followers, w-1))
}

// holdersOf counts the copies that hold off durably, the owner included.
func (c *confirmer) holdersOf(off uint64, followers []uint64) int {
	n := holders(followers, off)
	if c.tail > off {
		n++
	}
	return n
}

// release moves the watermark up (never down: a confirmed record stays
// confirmed) and returns the replies that releases: every waiter refused
// if the role failed or the assignment is below the floor, and otherwise
// the confirms of the waiters below the watermark.
func (c *confirmer) release() []outgoing {
	ft := c.followerTails()
	c.watermark = max(c.watermark, confirmedWatermark(c.tail, ft, c.w))
	switch {
	case c.failCode != "":
		return c.refuseAll(closeError(c.failCode, c.stream))
	case c.short():
		// Below the floor nothing is confirmed, not even a record written
		// before the floor was raised: every waiting publish is refused.
		return c.refuseAll(c.floorError())
	}
	var out []outgoing
	for len(c.pending) > 0 && c.pending[0].offset < c.watermark {
		w := c.pending[0]
		c.pending = c.pending[1:]
		out = append(out, c.confirmOut(w, c.holdersOf(w.offset, ft)))
	}
	if len(c.dups) > 0 {
		kept := c.dups[:0]
		for _, w := range c.dups {
			if w.offset < c.watermark {
				out = append(out, c.confirmOut(w, c.holdersOf(w.offset, ft)))
			} else {
				kept = append(kept, w)
			}
		}
		c.dups = kept
	}
	return out
}

func (c *confirmer) confirmOut(w *waiter, copies int) outgoing {
	if w.batch != nil {
		return c.batchConfirmOut(w, copies)
	}
	return outgoing{to: w.reply, ok: &wire.PublishConfirm{StreamID: c.id, Offset: w.offset, Epoch: c.epoch, Copies: copies, W: c.w, Duplicate: w.dup},
		start: w.deadline.Add(-c.timeout)}
}

// fail fails every waiter with code, and every later one too (release
// refuses them at once). The first code stays.
func (c *confirmer) fail(code string) []outgoing {
	if c.failCode == "" {
		c.failCode = code
	}
	return c.release()
}

// refuseAll answers every waiting publish with e.
func (c *confirmer) refuseAll(e *wire.Error) []outgoing {
	if c.waiting() == 0 {
		return nil
	}
	out := make([]outgoing, 0, c.waiting())
	for _, w := range c.pending {
		out = append(out, outgoing{to: w.reply, fail: e})
	}
	for _, w := range c.dups {
		out = append(out, outgoing{to: w.reply, fail: e})
	}
	c.pending, c.dups = nil, nil
	return out
}

// nextDeadline returns the earliest deadline of a waiting publish, if any
// waits (and the role has not failed: then none waits for long).
func (c *confirmer) nextDeadline() (time.Time, bool) {
	if c.failCode != "" {
		return time.Time{}, false
	}
	var earliest time.Time
	if len(c.pending) > 0 {
		earliest = c.pending[0].deadline
	}
	for _, w := range c.dups {
		if earliest.IsZero() || w.deadline.Before(earliest) {
			earliest = w.deadline
		}
	}
	return earliest, !earliest.IsZero()
}

// expire answers confirm_timeout to every publish past its deadline at
// now. Such a publish is never reported as confirmed afterwards, though
// its record may still become readable once enough copies hold it.
func (c *confirmer) expire(now time.Time) []outgoing {
	ft := c.followerTails()
	var out []outgoing
	timeout := func(w *waiter) {
		n := c.holdersOf(w.offset, ft)
		e := wire.Errorf(wire.CodeConfirmTimeout, "stream %s: offset %d held by %d copies of the %d needed within %v; not confirmed",
			c.stream, w.offset, n, c.w, c.timeout)
		e.Copies = &n
		out = append(out, outgoing{to: w.reply, fail: e})
	}
	for len(c.pending) > 0 && !c.pending[0].deadline.After(now) {
		timeout(c.pending[0])
		c.pending = c.pending[1:]
	}
	kept := c.dups[:0]
	for _, w := range c.dups {
		if w.deadline.After(now) {
			kept = append(kept, w)
		} else {
			timeout(w)
		}
	}
	c.dups = kept
	return out
}

// isLive reports whether an ack at at is recent enough at now for its
// follower to hold back retention and a graceful shutdown.
func isLive(a followerAck, now time.Time) bool { return now.Sub(a.at) < liveFollower }

// settled reports whether no publish waits for a confirm and every live
// follower has acked the owner's durable tail.
func (c *confirmer) settled(now time.Time) bool {
	if c.waiting() > 0 {
		return false
	}
	for _, f := range c.followers {
		if a, ok := c.acks[f]; ok && isLive(a, now) && a.record < c.tail {
			return false
		}
	}
	return true
}

// retentionKeepFrom is the lowest offset retention must keep: nothing at
// or above the watermark, and nothing a live follower has not acked.
func (c *confirmer) retentionKeepFrom(now time.Time) uint64 {
	keep := c.watermark
	for _, f := range c.followers {
		if a, ok := c.acks[f]; ok && isLive(a, now) && a.record < keep {
			keep = a.record
		}
	}
	return keep
}
