package host

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// onSeals is the batch seal subject's callback (brook.host.<node>.seals):
// the coordinator leader gathers the concurrent seals of a failover for
// this host into one request. Each seal of the batch counts against the
// seals' budget as a seal alone does, so a batch admits as many seals as
// the budget has room for and answers the rest overloaded (their
// recoveries ask again; counted and logged at most once a second like
// every cap's refusals), and a batch never holds more slots than it has
// seals. The admitted seals run concurrently, each in a goroutine of the
// request group of its own as a seal alone does (so the budget bounds
// them the same way), each as seal runs a seal alone: each commits its
// fence with a synced Pebble write, and run together Pebble's commit
// pipeline syncs the WAL once for all the writes queued behind the one
// syncing, so a batch costs a few fsyncs rather than one per seal
// (BenchmarkSealBatch). Running them all at once, not a few at a time,
// keeps one seal that waits (for its copy's queued writes, for a role to
// stop) from holding up the others.
//
// One goroutine of the request group (holding no budget slot; it runs
// even when every seal was refused) collects the seals' answers and sends
// the one reply once all have ended, or once the batch's TimeoutMs has
// passed: a seal still running then is answered timeout (an error answer
// is no answer to the recovery, which asks again; the seal goes on, holds
// its slot until it ends, and its fence is as good as any seal's). Every
// fence the reply reports is persisted.
func (h *Host) onSeals(m *nats.Msg) {
	batch, e := decodeSealBatch(m.Data)
	if e != nil {
		h.log.Warn("seal batch refused", "code", e.Code, "err", e.Message)
		h.metrics.sealAnswered(e)
		h.replyErr(m.Reply, e)
		return
	}
	reqs := batch.Seals
	results := make([]wire.SealResult, len(reqs))
	admitted := make([]bool, len(reqs))
	refused := 0
	for i := range reqs {
		if admitted[i] = h.sealReqs.take(); !admitted[i] {
			refused++
			results[i].Error = h.overloaded(h.sealReqs)
			h.metrics.sealAnswered(results[i].Error)
		}
	}
	if refused > 0 {
		h.noteRefused(h.sealReqs, refused)
	}
	received := time.Now()
	timeout := time.Duration(batch.TimeoutMs) * time.Millisecond
	started := h.reqs.Go(func() {
		late, spent := h.sealBatch(reqs, admitted, results, timeout)
		cut := fitSealBatchReply(results, max(h.nc.MaxPayload()-sealReplyMargin, 0))
		h.replyJSON(m.Reply, wire.SealBatchReply{Replies: results})
		// One line for the batch: its seals and the roles they stopped
		// are logged one by one at debug only (sealCopy).
		sealed, stale, missing := sealBatchCounts(results)
		h.log.Info("seal batch answered", "seals", len(reqs), "sealed", sealed, "stale", stale, "not_found", missing,
			"owners_stopped", spent.owners, "followers_stopped", spent.followers,
			"slowest_lock", spent.lock.String(), "slowest_fence", spent.fence.String(), "slowest_stop", spent.stop.String(),
			"refused", refused, "timed_out", late, "cut_for_size", cut, "took", time.Since(received).String())
	})
	if !started {
		for i := range reqs {
			if admitted[i] {
				h.sealReqs.give()
			}
		}
		e := h.stopping()
		h.metrics.sealAnswered(e)
		h.replyErr(m.Reply, e)
	}
}

// sealDone is one seal's answer in a batch: its index and result, and
// what the seal stopped and spent.
type sealDone struct {
	i  int
	r  wire.SealResult
	sp sealSpent
}

// batchSpent sums up the seals of a batch answered in time: the roles they
// stopped, and their slowest wait for the copy's lock, fence write and
// role stop.
type batchSpent struct {
	owners, followers int
	lock, fence, stop time.Duration
}

func (b *batchSpent) add(sp sealSpent) {
	switch sp.stopped {
	case wire.RoleOwner:
		b.owners++
	case wire.RoleFollower:
		b.followers++
	}
	b.lock, b.fence, b.stop = max(b.lock, sp.lock), max(b.fence, sp.fence), max(b.stop, sp.stop)
}

// sealBatchCounts counts a batch reply's seals answered sealed, stale and
// not found, for the batch's log line (the other errors are refused,
// timed out and cut for size, counted apart).
func sealBatchCounts(results []wire.SealResult) (sealed, stale, missing int) {
	for _, r := range results {
		switch {
		case r.Error == nil:
			sealed++
		case r.Error.Code == wire.CodeStaleEpoch:
			stale++
		case r.Error.Code == wire.CodeNotFound:
			missing++
		}
	}
	return sealed, stale, missing
}

// sealBatch runs the admitted seals of a batch at once, each in a
// goroutine of the request group that gives its budget slot back when it
// ends, and writes each one's answer into results. It returns once all
// have ended, or, with a timeout, once it has passed: each seal still
// running then is answered timeout, and late is how many. A seal that
// ends later sends its answer into a channel with room for every answer,
// which nobody reads any more. spent sums up the seals answered in time.
func (h *Host) sealBatch(reqs []wire.SealRequest, admitted []bool, results []wire.SealResult, timeout time.Duration) (late int, spent batchSpent) {
	done := make(chan sealDone, len(reqs))
	pending := make([]bool, len(reqs))
	running := 0
	for i, req := range reqs {
		if !admitted[i] {
			continue
		}
		started := h.reqs.Go(func() {
			defer h.sealReqs.give()
			reply, sp, e := h.sealCopy(req, slog.LevelDebug)
			h.metrics.sealAnswered(e)
			done <- sealDone{i: i, r: wire.SealResult{Reply: reply, Error: e}, sp: sp}
		})
		if !started {
			h.sealReqs.give()
			results[i].Error = h.stopping()
			continue
		}
		pending[i] = true
		running++
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for running > 0 {
		select {
		case d := <-done:
			results[d.i], pending[d.i] = d.r, false
			running--
			spent.add(d.sp)
		case <-expired:
			for i, p := range pending {
				if p {
					results[i].Error = wire.Errorf(wire.CodeTimeout, "seal of stream %s at fence %d still running on %s after the batch's %v; retry",
						reqs[i].Stream, reqs[i].FenceEpoch, h.cfg.Node, timeout)
				}
			}
			return running, spent
		}
	}
	return 0, spent
}

// sealReplyMargin is left of the connection's max payload for a batch
// reply's headers and framing.
const sealReplyMargin = 1024

// fitSealBatchReply keeps a batch reply within limit bytes of JSON: when
// it would exceed it (seal replies with long epoch histories), it
// answers seals from the end overloaded in place of their replies until
// it fits, so no reply is lost to the connection's max payload (an error
// answer is no answer; the recovery asks again, in a later batch). It
// returns how many it replaced. A limit not known (the connection's max
// payload is 0 before its first connect) leaves the reply whole.
func fitSealBatchReply(results []wire.SealResult, limit int64) (cut int) {
	if limit <= 0 {
		return 0
	}
	data, err := json.Marshal(wire.SealBatchReply{Replies: results})
	if err != nil || int64(len(data)) <= limit {
		return 0
	}
	size := int64(len(data))
	for i := len(results) - 1; i >= 0 && size > limit; i-- {
		if results[i].Reply == nil {
			continue
		}
		before, _ := json.Marshal(results[i])
		results[i] = wire.SealResult{Error: wire.Errorf(wire.CodeOverloaded, "seal of stream %s: the batch's reply would exceed %d bytes; retry",
			results[i].Reply.Stream, limit)}
		after, _ := json.Marshal(results[i])
		size -= int64(len(before) - len(after))
		cut++
	}
	return cut
}

// decodeSealBatch decodes a batch strictly: unknown fields anywhere, an
// empty batch or one of more than wire.MaxSealBatch seals are bad_request.
// Each seal's own fields are checked when it runs (sealCopy), so a bad
// entry is answered on its own.
func decodeSealBatch(data []byte) (wire.SealBatch, *wire.Error) {
	var b wire.SealBatch
	if e := decodeStrict(data, &b); e != nil {
		return b, e
	}
	switch {
	case len(b.Seals) == 0:
		return b, wire.Errorf(wire.CodeBadRequest, "seal batch holds no seal")
	case len(b.Seals) > wire.MaxSealBatch:
		return b, wire.Errorf(wire.CodeBadRequest, "seal batch holds %d seals, more than the %d allowed", len(b.Seals), wire.MaxSealBatch)
	}
	return b, nil
}
