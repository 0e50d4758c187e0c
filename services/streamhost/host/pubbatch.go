package host

import (
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// Publish batches (wire.PublishBatchSubject, issue 16): one NATS request
// carries many records. The appender stages a batch's records with the
// single publishes queued with it, writes them all in one Append (one group
// commit), and the batch waits as one waiter at its highest offset: the
// watermark passing it confirms every record of the batch at once (each
// record's offset is below it), so the batch gets one frame.PubReply.
// Duplicate suppression is per record, as for single publishes: a record
// whose producer sequence is in the window (or earlier in the same Append)
// is not written again and answers with the first write's offset.

// pubBatchReq is one publish batch being staged and then waiting for its
// confirm. Only the appender goroutine writes it before its waiter is
// queued; after, it is read under the owner's mu (confirmOut) and then by
// send, and no longer written.
type pubBatchReq struct {
	reply   string
	results []frame.PubResult
	// staged counts the records staged for the Append and not yet placed.
	staged int
	// written: a record of the batch was written by this Append (not only
	// repeats), so its waiter is a pending one, not a repeat.
	written bool
	maxOff  uint64
	refused bool
}

// pubBatchOut is a publish batch's confirm, built under the owner's lock.
type pubBatchOut struct {
	reply frame.PubReply
}

// staging collects the records of one Append from the queued publishes.
type staging struct {
	data    [][]byte
	items   []produced
	payload int
	// inBatch maps a producer's sequence to its record's index in data,
	// for repeats within the Append.
	inBatch map[producerSeq]int
	// arena holds the records' envelopes: one allocation for many
	// records, which the store copies into its own batch (AppendWritten).
	arena []byte
}

// producerSeq names one record of a producer.
type producerSeq struct {
	producer string
	seq      uint64
}

// stagingArena is the size of the chunks a staging's envelopes are
// written into; a record larger than it gets a chunk of its own size.
const stagingArena = 16 << 10

// envelope returns payload in its envelope (producer and sequence),
// written into the staging's arena.
func (st *staging) envelope(producer string, seq uint64, payload []byte) []byte {
	n := envelope.Size(producer, seq, payload)
	if cap(st.arena)-len(st.arena) < n {
		st.arena = make([]byte, 0, max(n, stagingArena))
	}
	start := len(st.arena)
	st.arena = envelope.Append(st.arena, producer, seq, payload)
	return st.arena[start:len(st.arena):len(st.arena)]
}

// stage adds one record (a single publish, or a record of a batch) with
// producer and sequence in it: a repeat of a sequence in the duplicate
// window or earlier in this Append is not written again.
func (o *owner) stage(st *staging, it produced, payload []byte) {
	if p := it.producer; p != "" {
		if off, ok := o.dd.Lookup(p, it.seq); ok {
			it.repeatOf = off
			st.items = append(st.items, it)
			return
		}
		k := producerSeq{p, it.seq}
		if idx, ok := st.inBatch[k]; ok {
			it.repeatIdx = idx
			st.items = append(st.items, it)
			return
		}
		if st.inBatch == nil {
			st.inBatch = make(map[producerSeq]int, max(cap(st.items)-len(st.items), 8))
		}
		st.inBatch[k] = len(st.data)
	}
	it.index = len(st.data)
	st.payload += len(payload)
	// The producer and sequence are stored with the record, so that they
	// replicate and a later owner can rebuild its window.
	st.data = append(st.data, st.envelope(it.producer, it.seq, payload))
	st.items = append(st.items, it)
}

// isPubBatch reports whether m came on the publish batch subject.
func isPubBatch(m *nats.Msg) bool { return wire.StreamOp(m.Subject) == wire.OpPublishBatch }

// onPublishBatch takes a publish batch (onStreamOp): like onPublish,
// it checks the size and queues the message; the appender decodes it.
func (o *owner) onPublishBatch(m *nats.Msg) {
	if len(m.Data) > wire.MaxPublishBatchBytes {
		o.refusePublish(m.Reply, wire.Errorf(wire.CodePayloadTooLarge,
			"publish batch of %d bytes is over the limit of %d; split it", len(m.Data), wire.MaxPublishBatchBytes))
		return
	}
	o.enqueue(m)
}

// stagePubBatch decodes the publish batch m and stages its records. A bad
// frame or a batch over wire.MaxPublishBatchRecords is refused whole; a
// record over the host's MaxPayload is refused on its own in the reply.
func (o *owner) stagePubBatch(st *staging, m *nats.Msg) {
	b, err := frame.DecodePubBatch(m.Data)
	if err != nil {
		o.refusePublish(m.Reply, wire.Errorf(wire.CodeBadRequest, "stream %s: %v", o.stream, err))
		return
	}
	if n := len(b.Records); n > wire.MaxPublishBatchRecords {
		o.refusePublish(m.Reply, wire.Errorf(wire.CodePayloadTooLarge,
			"publish batch of %d records is over the limit of %d; split it", n, wire.MaxPublishBatchRecords))
		return
	}
	req := &pubBatchReq{reply: m.Reply, results: make([]frame.PubResult, len(b.Records))}
	st.items = slices.Grow(st.items, len(b.Records))
	st.data = slices.Grow(st.data, len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		switch {
		case len(r.Data) > o.h.cfg.MaxPayload:
			req.results[i].Code = wire.CodePayloadTooLarge
			o.h.metrics.publishRefused(wire.CodePayloadTooLarge, 1)
		case len(r.Producer) > maxProducerName:
			req.results[i].Code = wire.CodeBadRequest
			o.h.metrics.publishRefused(wire.CodeBadRequest, 1)
		default:
			req.staged++
			o.stage(st, produced{producer: r.Producer, seq: r.Seq, index: -1, repeatIdx: -1, batch: req, rec: i}, r.Data)
		}
	}
	if req.staged == 0 {
		// Every record was refused on its own: nothing to wait for.
		o.mu.Lock()
		w := o.mu.conf.w
		o.mu.Unlock()
		o.sendPubReply(m.Reply, &pubBatchOut{reply: frame.PubReply{W: w, Results: req.results}})
	}
}

// place records where the batch's record rec went (offset off, a repeat if
// dup) once the Append succeeded, under the owner's mu. It returns the
// batch's waiter once every staged record is placed, nil before.
func (r *pubBatchReq) place(rec int, off uint64, dup bool, deadline time.Time) *waiter {
	r.results[rec] = frame.PubResult{Offset: off, Duplicate: dup}
	if !dup {
		r.written = true
	}
	r.maxOff = max(r.maxOff, off)
	r.staged--
	if r.staged > 0 {
		return nil
	}
	return &waiter{reply: r.reply, offset: r.maxOff, deadline: deadline, dup: !r.written, batch: r}
}

// refuse reports whether the batch is to be refused now: true the first
// time only, for a failed Append.
func (r *pubBatchReq) refuse() bool {
	if r.refused {
		return false
	}
	r.refused = true
	return true
}

// batchConfirmOut is confirmOut of a publish batch's waiter: every record
// is at or below its offset, so all are confirmed.
func (c *confirmer) batchConfirmOut(w *waiter, copies int) outgoing {
	return outgoing{to: w.reply, pub: &pubBatchOut{reply: frame.PubReply{Copies: copies, W: c.w, Results: w.batch.results}},
		start: w.deadline.Add(-c.timeout)}
}

// sendPubReply sends a publish batch's reply frame, with the stream id and
// epoch as headers (a single publish's confirm has them in its JSON).
func (o *owner) sendPubReply(to string, p *pubBatchOut) {
	if to == "" {
		return
	}
	m := nats.NewMsg(to)
	m.Header.Set(wire.HeaderStreamID, o.idHeader)
	m.Header.Set(wire.HeaderEpoch, strconv.FormatUint(o.epoch, 10))
	m.Data = frame.AppendPubReply(nil, &p.reply)
	o.h.publishReply(m)
}

// confirms is how many publishes a confirm reply confirms: one, or a
// batch's records not refused on their own.
func (r *outgoing) confirms() int {
	if r.pub == nil {
		return 1
	}
	n := 0
	for i := range r.pub.reply.Results {
		if r.pub.reply.Results[i].Code == "" {
			n++
		}
	}
	return n
}
