package host

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// Fetch bounds (wire.FetchRequest).
const (
	defaultFetchRecords = 1000
	maxFetchRecords     = 10000
	defaultFetchBytes   = 1 << 20
	maxFetchBytes       = 8 << 20
	maxFetchWait        = wire.MaxFetchWait

	// Replication bounds.
	maxReplRecords    = 4096
	maxReplEvents     = 4096
	defaultReplBytes  = 1 << 20
	maxReplWait       = 5 * time.Second
	frameHeadroom     = 64 << 10 // frame fields and NATS headers beside the record bytes
	minReplyByteLimit = 64 << 10
)

// byteLimit caps a requested byte bound by what one message can carry
// (maxMsg: a NATS message for a fetch, the replication link's for a
// follower).
func byteLimit(asked, def, limit int, maxMsg int64) int {
	if asked <= 0 {
		asked = def
	}
	asked = min(asked, limit)
	if mp := int(maxMsg) - frameHeadroom; mp > 0 {
		asked = min(asked, max(mp, minReplyByteLimit))
	}
	return asked
}

// replyFetch sends an encoded batch to a reader with the owner's stream id
// in the wire.HeaderStreamID header, so that a reader learns which stream
// of the name (which incarnation) it reads on its first fetch.
func (o *owner) replyFetch(to string, batch []byte) {
	if to == "" {
		return
	}
	m := nats.NewMsg(to)
	m.Header.Set(wire.HeaderStreamID, o.idHeader)
	since := o.started
	if r := o.h.conn.Began(); r.After(since) {
		since = r
	}
	m.Header.Set(wire.HeaderServingFor, strconv.FormatInt(time.Since(since).Milliseconds(), 10))
	m.Data = batch
	o.h.publishReply(m)
}

// fetchWriters recycles the frames of fetch replies: a reply is copied
// into the connection's buffer when it is sent, so its frame can encode
// the next one, and a reader catching up does not allocate (and clear) a
// new megabyte-sized frame for every fetch.
var fetchWriters = sync.Pool{New: func() any { return new(frame.BatchWriter) }}

// storedRecordError is a stored record a fetch could not strip.
type storedRecordError struct {
	offset uint64
	err    error
}

func (e *storedRecordError) Error() string { return fmt.Sprintf("record %d: %v", e.offset, e.err) }
func (e *storedRecordError) Unwrap() error { return e.err }

// readFetch encodes the records from from below wm, within the bounds,
// into w as a fetch reply's records: each stored record's envelope is
// stripped and its payload copied into the frame straight from the store,
// with no slice of records in between. It returns how many it read.
func (o *owner) readFetch(w *frame.BatchWriter, from uint64, maxRecs, maxBytes int, wm uint64) (int, error) {
	w.Reset(0)
	return o.c.ReadFunc(from, maxRecs, maxBytes, wm, func(off uint64, timeNS int64, stored []byte) error {
		p, err := envelope.Payload(stored)
		if err != nil {
			return &storedRecordError{offset: off, err: err}
		}
		w.Add(off, timeNS, p)
		return nil
	})
}

// toFrameRecords converts stored records for a replication batch: the
// stored bytes (envelope included) travel unchanged, so every copy stores
// and digests the same bytes.
func toFrameRecords(recs []streamlog.Record) []frame.Record {
	if len(recs) == 0 {
		return nil
	}
	out := make([]frame.Record, len(recs))
	for i, r := range recs {
		out[i] = frame.Record{Offset: r.Offset, TimeNS: r.TimeNS, Data: r.Data}
	}
	return out
}

// onRepl takes what the replication link delivers (replLink.serve). A
// request may wait for new data, so it is served in its own goroutine,
// never in the link's, within the replication budget: readers' requests
// cannot take its slots. A standalone ack never waits: it is served here.
func (o *owner) onRepl(c replCall) {
	if c.isAck() {
		o.h.metrics.replReceived(replKindAck)
		o.serveRepl(c)
		return
	}
	o.h.metrics.replReceived(replKindRequest)
	o.goRequest(c.fail, o.replReqs, func() { o.serveRepl(c) })
}

// serveRepl answers a follower: records below the owner's written tail
// (durable or still in its group commit) from the follower's read position,
// and cursor events below its durable cursor tail from the follower's
// cursor tail. The request itself is the follower's ack of everything below
// its durable tails; a standalone ack is only that, and is not answered.
func (o *owner) serveRepl(c replCall) {
	req, err := frame.DecodeReplRequest(c.data)
	if err != nil {
		c.fail(wire.Errorf(wire.CodeBadRequest, "replication request: %v", err))
		return
	}
	// c.from is the sender's node as the link authenticated it, so a body
	// naming another node is a host speaking (and acking) for another. It
	// is refused before anything of it counts.
	if req.Node != c.from {
		o.misnamedFollower(c, req.Node)
		return
	}
	if req.StreamID != o.id || req.Epoch != o.epoch {
		c.fail(wire.Errorf(wire.CodeStaleEpoch,
			"stream %s: request for stream id %d epoch %d; this owner is stream id %d epoch %d",
			o.stream, req.StreamID, req.Epoch, o.id, o.epoch))
		return
	}
	if !o.isFollower(req.Node) {
		c.fail(wire.Errorf(wire.CodeNotFound,
			"stream %s: node %s is not a follower at epoch %d", o.stream, req.Node, o.epoch))
		return
	}
	// readFrom is where the follower reads from: its written tail, at or
	// past its durable record tail (frame.ReplRequest.ReadPosition).
	readFrom, readDigest := req.ReadPosition()
	t := o.c.Tails()
	if readFrom > t.RecordWritten || req.CursorTail > t.CursorWritten {
		// A follower cannot hold more than its owner wrote unless it
		// missed a history cut; counting it would confirm records that
		// are not there. It may hold more than the owner holds durably:
		// the owner replicates what it wrote while its own fsync runs.
		o.log.Error("follower claims more than the owner holds", "follower", req.Node,
			"follower_tail", req.RecordTail, "follower_read_from", readFrom, "owner_tail", t.RecordWritten,
			"follower_cursor_tail", req.CursorTail, "owner_cursor_tail", t.CursorWritten)
		c.fail(wire.Errorf(wire.CodeBadRequest,
			"stream %s: follower tails %d (read from %d)/%d are past the owner's %d/%d", o.stream, req.RecordTail, readFrom, req.CursorTail, t.RecordWritten, t.CursorWritten))
		return
	}
	// Log matching: the follower's digest at its durable tail must be the
	// owner's there (of a written record if the tail is past the owner's
	// durable one), or its log differs below the tail and its ack would
	// count records it does not hold. Its digest at its read position is
	// checked too: records sent from there must continue the owner's log,
	// not another (its records between the two tails are written, not yet
	// durable, and were the owner's when it applied them, so this fails
	// only for a follower that is not on this owner's history). Either
	// mismatch is diverged and counts nothing. A position below the
	// owner's head cannot be checked (the owner's records there are gone):
	// a durable tail there is not counted, and a read position there is
	// only told where to restart; a read position at or past the head is
	// checked even when the durable tail is below it.
	type check struct{ at, theirs uint64 }
	var checks [2]check
	n := 0
	ackable := req.RecordTail >= t.Head
	if ackable {
		checks[n] = check{req.RecordTail, req.TailDigest}
		n++
	}
	if readFrom > req.RecordTail && readFrom >= t.Head {
		checks[n] = check{readFrom, readDigest}
		n++
	}
	matched := true
	for _, ck := range checks[:n] {
		od, err := o.c.DigestAt(ck.at)
		switch {
		case errors.Is(err, streamlog.ErrBelowHead):
			// Retention moved the head since t was read: the follower
			// restarts at the head, below.
			matched = false
		case err != nil:
			o.log.Error("read digest for follower", "follower", req.Node, "at", ck.at, "err", err)
			c.fail(wire.Errorf(wire.CodeInternal, "stream %s: read digest at %d: %v", o.stream, ck.at, err))
			return
		case od != ck.theirs:
			o.divergedFollower(c, req.Node, ck.at, ck.theirs, od, t.Record)
			return
		}
		if !matched {
			break
		}
	}
	if matched && ackable {
		o.ack(req.Node, req.RecordTail, req.CursorTail)
	}
	if c.isAck() {
		return // counted, nothing to send
	}

	wait := wire.WaitUpTo(int64(req.WaitMS), maxReplWait)
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	begun := false
	for {
		// Woken once per append, when its records are written: not
		// again when they become durable, which gives the follower
		// nothing to read (its ack of them comes on its own).
		ch := o.c.WrittenChanged()
		t = o.c.Tails()
		// Nothing is served before the epoch's begin is durable
		// (owner.begun): the request waits for it like for new data.
		var beginning <-chan struct{}
		if !begun {
			select {
			case <-o.begun:
				begun = true
			default:
				beginning = o.begun
			}
		}
		if begun && (readFrom < t.Head || readFrom < t.RecordWritten || req.CursorTail < t.CursorDurable) {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(left)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-beginning:
		case <-timer.C:
			deadline = time.Now()
		case <-o.ctx.Done():
			c.fail(o.closedErr())
			return
		}
	}

	b := o.replBatch(t, readFrom)
	if !begun {
		c.answer(b) // nothing yet: the follower asks again
		return
	}
	if readFrom < t.Head {
		// The follower is behind the retained head: it restarts there.
		b.Next = t.Head
		c.answer(b)
		return
	}
	if readFrom < t.RecordWritten {
		// Written records, durable here or not yet: the owner's fsync and
		// the follower's overlap. A record is confirmed only once the
		// owner's own copy is durable too (confirmer), so a follower
		// holding one the owner then loses holds an unconfirmed record,
		// which a recovery keeps or cuts like any other (docs/failover.md).
		err := o.readWritten(b, t, byteLimit(int(req.MaxBytes), defaultReplBytes, maxFetchBytes, o.h.link.maxMessage()))
		if errors.Is(err, streamlog.ErrBelowHead) {
			// Retention moved the head while this request waited.
			nt := o.c.Tails()
			b.Head, b.HeadDigest = nt.Head, nt.HeadDigest
			b.Next = b.Head
			c.answer(b)
			return
		}
		if err != nil {
			o.log.Error("read records for follower", "follower", req.Node, "from", readFrom, "err", err)
			c.fail(wire.Errorf(wire.CodeInternal, "stream %s: read records: %v", o.stream, err))
			return
		}
	}
	if req.CursorTail < t.CursorDurable {
		evs, err := o.c.ReadCursorEvents(req.CursorTail, maxReplEvents, t.CursorDurable)
		if err != nil {
			o.log.Error("read cursor events for follower", "follower", req.Node, "from", req.CursorTail, "err", err)
			c.fail(wire.Errorf(wire.CodeInternal, "stream %s: read cursor events: %v", o.stream, err))
			return
		}
		for _, e := range evs {
			b.CursorEvents = append(b.CursorEvents, frame.CursorEvent{Offset: e.Offset, Cursor: e.Cursor, Position: e.Position})
		}
	}
	c.answer(b)
}

// replBatch is the batch a follower reading from from is answered with at
// the owner's tails t, before any records (readWritten adds them): its
// request's reply (serveRepl) and its records in a host wake (wakeBatch).
func (o *owner) replBatch(t streamlog.Tails, from uint64) *frame.Batch {
	return &frame.Batch{Epoch: o.epoch, Head: t.Head, HeadDigest: t.HeadDigest, Tail: t.Record, Confirmed: o.confirmed(), Next: from}
}

// readWritten adds to b the records from b.Next below the owner's written
// tail at t (durable here or still in its group commit), within maxBytes
// (the first whatever its size), and moves b.Next past them.
func (o *owner) readWritten(b *frame.Batch, t streamlog.Tails, maxBytes int) error {
	recs, err := o.c.ReadWritten(b.Next, maxReplRecords, maxBytes, t.RecordWritten)
	if err != nil {
		return err
	}
	b.Records = toFrameRecords(recs)
	b.Next += uint64(len(recs))
	return nil
}

// divergedFollower answers a follower whose log does not match the
// owner's below offset at (its record tail or its read position) with
// diverged; its ack is not counted and nothing is served to it. Only a
// newer assignment (with its history cut) can bring such a copy back, so
// it is logged once per offset, not on every retry.
func (o *owner) divergedFollower(c replCall, node string, at, theirs, ours, ownerTail uint64) {
	o.mu.Lock()
	last, seen := o.mu.diverged[node]
	o.mu.diverged[node] = at
	o.mu.Unlock()
	if !seen || last != at {
		o.log.Error("follower's log diverged from the owner's; its ack is not counted", "follower", node,
			"follower_tail", at, "follower_digest", fmt.Sprintf("%016x", theirs),
			"owner_digest_there", fmt.Sprintf("%016x", ours), "owner_tail", ownerTail)
	}
	c.fail(wire.Errorf(wire.CodeDiverged,
		"stream %s: follower %s at record tail %d has digest %016x there, the owner %016x (owner tail %d): the logs differ below the tail",
		o.stream, node, at, theirs, ours, ownerTail))
}

// misnamedFollower refuses a replication request from c.from whose body
// names claimed, logging it once per claim.
func (o *owner) misnamedFollower(c replCall, claimed string) {
	node := c.from
	o.mu.Lock()
	last, seen := o.mu.misnamed[node]
	o.mu.misnamed[node] = claimed
	o.mu.Unlock()
	if !seen || last != claimed {
		o.log.Error("replication request names another node than its sender; refused, its ack is not counted",
			"sender", node, "body_node", claimed)
	}
	c.fail(wire.Errorf(wire.CodeBadRequest,
		"stream %s: replication request from node %s names node %s", o.stream, node, claimed))
}

// onFetch takes a fetch (onStreamOp); fetches may long-poll, so each
// is served in its own goroutine, within the readers' budget.
func (o *owner) onFetch(m *nats.Msg) {
	o.goRequest(o.h.failer(m.Reply), o.h.readerReqs, func() { o.serveFetch(m) })
}

// serveFetch answers a reader with records below the confirmed watermark
// only: a reader never sees a record that could still be lost. A fetch
// that finds nothing to return and may wait takes a slot of the host's
// long-poll budget for its wait, or is answered overloaded at once.
func (o *owner) serveFetch(m *nats.Msg) {
	var req wire.FetchRequest
	if e := decodeStrict(m.Data, &req); e != nil {
		o.h.replyErr(m.Reply, e)
		return
	}
	// A newer stream's owner may hold this fetch for its whole wait (a long
	// poll with nothing new): a refusal held back only the usual delay
	// would beat it every time.
	wait := wire.WaitUpTo(req.WaitMS, maxFetchWait)
	if o.refuseOtherStream(m, wait) {
		return
	}
	t := o.c.Tails()
	var from uint64
	switch req.Start {
	case "offset":
		from = req.Offset
	case "earliest":
		from = t.Head
	case "latest":
		// The settled point (the watermark, or the history start right
		// after a failover), not the tail: records between it and the
		// tail may be cut by a failover, and a reader told to go on past
		// them would skip whatever a new owner confirms at those offsets.
		from = o.settledPoint()
	case "":
		if req.Cursor == "" {
			o.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "fetch names neither a cursor nor a start"))
			return
		}
		if e := wire.ValidName("cursor", req.Cursor); e != nil {
			o.h.replyErr(m.Reply, wire.AsError(e))
			return
		}
		pos, ok := o.c.Cursor(req.Cursor)
		if !ok {
			pos = t.Head // a new cursor starts at the retained head
		}
		from = pos
	default:
		o.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "start %q: want offset, earliest or latest", req.Start))
		return
	}
	if req.MaxRecords < 0 || req.MaxBytes < 0 || req.WaitMS < 0 {
		o.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest, "max_records, max_bytes and wait_ms must not be negative"))
		return
	}
	maxRecs := req.MaxRecords
	if maxRecs == 0 {
		maxRecs = defaultFetchRecords
	}
	maxRecs = min(maxRecs, maxFetchRecords)
	maxBytes := byteLimit(req.MaxBytes, defaultFetchBytes, maxFetchBytes, o.h.nc.MaxPayload())
	deadline := time.Now().Add(wait)

	var (
		timer *time.Timer
		w     *frame.BatchWriter // taken once there are records to read
	)
	for {
		wm, ch := o.wmState()
		t = o.c.Tails()
		if from < t.Head {
			from = t.Head // retention removed what was asked for
		}
		if from < wm {
			if w == nil {
				w = fetchWriters.Get().(*frame.BatchWriter)
				defer fetchWriters.Put(w)
			}
			n, err := o.readFetch(w, from, maxRecs, maxBytes, wm)
			var bad *storedRecordError
			switch {
			case errors.Is(err, streamlog.ErrBelowHead):
				continue // the head moved in between; start again from it
			case errors.As(err, &bad):
				o.log.Error("decode stored records for reader", "from", from, "err", err)
				o.h.replyErr(m.Reply, wire.Errorf(wire.CodeInternal, "stream %s: stored record: %v", o.stream, err))
				return
			case err != nil:
				o.log.Error("read records for reader", "from", from, "err", err)
				o.h.replyErr(m.Reply, wire.Errorf(wire.CodeInternal, "stream %s: read records: %v", o.stream, err))
				return
			}
			o.replyFetch(m.Reply, w.Finish(&frame.Batch{
				Epoch: o.epoch, Head: t.Head, HeadDigest: t.HeadDigest, Tail: t.Record, Confirmed: wm,
				Next: from + uint64(n),
			}))
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			// Nothing to read: the reader goes on from where it asked,
			// but never from past the point this copy has settled (its
			// watermark, or its history start right after a failover: a
			// cursor at or below the start keeps its position).
			o.replyFetch(m.Reply, frame.AppendBatch(nil, &frame.Batch{Epoch: o.epoch, Head: t.Head, HeadDigest: t.HeadDigest, Tail: t.Record, Confirmed: wm, Next: min(from, o.settledAt(wm))}))
			return
		}
		if timer == nil {
			if !o.h.fetchWaits.take() {
				o.h.refuse(o.h.failer(m.Reply), o.h.fetchWaits)
				return
			}
			defer o.h.fetchWaits.give()
			timer = time.NewTimer(left)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			deadline = time.Now()
		case <-o.ctx.Done():
			o.h.replyErr(m.Reply, o.closedErr())
			return
		}
	}
}

// commitHold is how long a cursor commit above the watermark but within
// the owner's tail waits for the watermark to pass it before it is
// answered with the retryable recovering code.
const commitHold = time.Second

// onCommit records a cursor commit as a cursor event. It is written without
// an fsync (the store syncs cursor events on its interval), so a commit at
// or below the watermark is quick enough for the callback itself; one
// above it waits for the watermark in its own goroutine, within the
// readers' budget.
func (o *owner) onCommit(m *nats.Msg) {
	var req wire.CursorCommit
	if e := decodeStrict(m.Data, &req); e != nil {
		o.h.replyErr(m.Reply, e)
		return
	}
	if e := wire.ValidName("cursor", req.Cursor); e != nil {
		o.h.replyErr(m.Reply, wire.AsError(e))
		return
	}
	if o.closing.Load() != nil {
		o.h.replyErr(m.Reply, o.closedErr())
		return
	}
	if o.refuseOtherStream(m, 0) {
		return
	}
	if req.Offset <= o.settledPoint() {
		o.commit(m.Reply, req)
		return
	}
	// A reader is only ever given records below the watermark of the
	// owner that answered it, and every confirmed record is on the copy a
	// failover promotes, so a commit past this copy's tail is a client
	// bug. One within the tail but above the watermark is honest right
	// after a failover: the previous owner's watermark was ahead of this
	// owner's until its followers acknowledge.
	if tail := o.c.Tails().Record; req.Offset > tail {
		o.h.replyErr(m.Reply, wire.Errorf(wire.CodeBadRequest,
			"stream %s: commit of cursor %s at %d is past the owner's tail %d", o.stream, req.Cursor, req.Offset, tail))
		return
	}
	o.goRequest(o.h.failer(m.Reply), o.h.readerReqs, func() { o.commitWhenConfirmed(m.Reply, req) })
}

// commitWhenConfirmed waits up to commitHold for the watermark to reach a
// commit's offset, then records it, or answers recovering (retryable).
func (o *owner) commitWhenConfirmed(reply string, req wire.CursorCommit) {
	timer := time.NewTimer(commitHold)
	defer timer.Stop()
	for {
		wm, ch := o.wmState()
		if req.Offset <= o.settledAt(wm) {
			o.commit(reply, req)
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			o.h.replyErr(reply, wire.Errorf(wire.CodeRecovering,
				"stream %s: commit of cursor %s at %d waits for the confirmed watermark %d of a new owner; retry", o.stream, req.Cursor, req.Offset, wm))
			return
		case <-o.ctx.Done():
			o.h.replyErr(reply, o.closedErr())
			return
		}
	}
}

// commit writes a cursor commit at or below the watermark and answers it;
// while a planned move holds the owner's intake it refuses it (move.go).
func (o *owner) commit(reply string, req wire.CursorCommit) {
	if e := o.enterWrite(); e != nil { // move.go: held by a planned move's hand-off
		o.h.replyErr(reply, e)
		return
	}
	defer o.leaveWrite()
	ev, err := o.c.AppendCursor(req.Cursor, req.Offset)
	if err != nil {
		e := o.appendError(err)
		if e.Code == wire.CodeInternal {
			o.log.Error("append cursor event", "cursor", req.Cursor, "err", err)
		}
		o.h.replyErr(reply, e)
		return
	}
	o.h.replyJSON(reply, wire.CursorCommitReply{Cursor: req.Cursor, Offset: req.Offset, EventOffset: ev})
}
