package host

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/services/streamhost/dedupe"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// A copy that becomes the owner fills its duplicate window from the newest
// records of its log before it takes a publish (owner.go). On a failover
// that read was on the critical path: tens of milliseconds for a few
// thousand records, after the new assignment arrived. Every copy a
// recovery may promote is sealed first, and a sealed copy's log does not
// change until the new assignment is applied; so the seal starts building
// the window in the background (prebuilt), and the promotion takes it if
// the copy's tail and digest are still those it was built at — the same
// log, since the digest chains every record — waiting for it to finish if
// need be. Otherwise (a history cut, appends since, no seal) the promotion
// builds the window itself, as before.

// prebuilt is a duplicate window being built from a sealed copy's log.
type prebuilt struct {
	c            *streamlog.Copy
	tail, digest uint64 // the copy's record tail and digest it is built at
	done         chan struct{}
	// Set before done is closed; w is nil if the build failed.
	w       *dedupe.Window
	scanned uint64
}

// startPrebuild builds the window of c at tails t in a goroutine of the
// host's background group; nil when the host is stopping.
func (h *Host) startPrebuild(c *streamlog.Copy, t streamlog.Tails, log *slog.Logger) *prebuilt {
	if h.bgCtx.Err() != nil {
		return nil
	}
	p := &prebuilt{c: c, tail: t.Record, digest: t.RecordDigest, done: make(chan struct{})}
	h.goBG(func() {
		defer close(p.done)
		w, st, err := buildWindow(h.bgCtx, c, t, h.cfg.DedupeRebuildRecords, h.cfg.DedupeRebuildBytes, log)
		if err != nil {
			log.Debug("duplicate window not prebuilt", "err", err)
			return
		}
		if now := c.Tails(); now.Record != t.Record || now.RecordDigest != t.RecordDigest {
			// The log changed under the build (a history cut, a
			// follower's appends): what it read may mix two logs.
			log.Debug("duplicate window not prebuilt: the log changed during the build")
			return
		}
		p.w, p.scanned = w, st.scanned
		if st.scanned > 0 {
			log.Info("duplicate window prebuilt from the sealed log", "records_scanned", st.scanned,
				"bytes_scanned", st.bytes, "sequences", st.sequences, "producers", w.Producers(), "took", st.took)
		}
	})
	return p
}

// take returns the window if it was built from c at tails t, waiting for
// the build; nil if it was built from another copy or at other tails,
// failed, or ctx ended first.
func (p *prebuilt) take(ctx context.Context, c *streamlog.Copy, t streamlog.Tails) *dedupe.Window {
	if p == nil || p.c != c || p.tail != t.Record || p.digest != t.RecordDigest {
		return nil
	}
	select {
	case <-p.done:
		return p.w
	case <-ctx.Done():
		return nil
	}
}

// windowStats describe one build of a window.
type windowStats struct {
	scanned, bytes uint64
	sequences      int
	took           time.Duration
}

// buildWindow fills a new duplicate window from the newest records of c
// below tails t, at most maxRecords records and about maxBytes bytes,
// newest first, and then records them oldest first so that the window's
// eviction keeps the newest. A record that does not decode is skipped with
// a warning; a read error other than retention's ends the scan early.
func buildWindow(ctx context.Context, c *streamlog.Copy, t streamlog.Tails, maxRecords int, maxBytes int64, log *slog.Logger) (*dedupe.Window, windowStats, error) {
	started := time.Now()
	type entry struct {
		producer string
		seq, off uint64
	}
	var found []entry // newest first
	leftRecs := uint64(max(maxRecords, 0))
	leftBytes := maxBytes
	var st windowStats
	hi := t.Record
	// Chunks are read oldest to newest within, newest chunk first; the
	// chunk size follows the average record size seen so far, so that the
	// byte bound is not overshot by much.
	chunk := uint64(64)
scan:
	for hi > t.Head && leftRecs > 0 && leftBytes > 0 {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		n := min(chunk, hi-t.Head, leftRecs)
		lo := hi - n
		var recs []streamlog.Record
		for from := lo; from < hi; {
			rs, err := c.Read(from, int(hi-from), 0, hi)
			if err != nil || len(rs) == 0 {
				if err != nil && !errors.Is(err, streamlog.ErrBelowHead) {
					log.Error("rebuild duplicate window: read", "from", from, "err", err)
				}
				// Retention removed what is left below: nothing older
				// remains to read.
				break scan
			}
			recs = append(recs, rs...)
			from = rs[len(rs)-1].Offset + 1
		}
		for i := len(recs) - 1; i >= 0 && leftRecs > 0 && leftBytes > 0; i-- {
			r := recs[i]
			leftRecs--
			leftBytes -= int64(len(r.Data))
			st.scanned++
			st.bytes += uint64(len(r.Data))
			env, err := envelope.Decode(r.Data)
			if err != nil {
				log.Warn("rebuild duplicate window: undecodable record", "offset", r.Offset, "err", err)
				continue
			}
			if env.Producer != "" {
				found = append(found, entry{env.Producer, env.Seq, r.Offset})
			}
		}
		hi = lo
		if leftBytes > 0 {
			avg := max(st.bytes/max(st.scanned, 1), 1)
			chunk = min(max(uint64(leftBytes)/avg, 1), maxAppendBatch)
		}
	}
	w := dedupe.New(dedupe.DefaultPerProducer, dedupe.DefaultProducers)
	for i := len(found) - 1; i >= 0; i-- {
		w.Record(found[i].producer, found[i].seq, found[i].off)
	}
	st.sequences = len(found)
	st.took = time.Since(started)
	return w, st, nil
}

// A copy's window also outlives its roles (copyWindow): the owner records
// every write it makes, and a follower records what it applies, so a copy
// whose window still matches its log is promoted without reading the log
// at all. A copy created empty starts with an empty window that matches;
// after a restart a copy has none until a seal prebuilds one.

// copyWindow is a duplicate window with the log it describes: it answers
// for copy c exactly while c's record tail and digest are tail and digest.
// The replica keeps it across roles under replica.mu and lends it to the
// role it starts; while a role runs, its goroutine (the owner's appender,
// the follower's worker) is the window's only user.
type copyWindow struct {
	c            *streamlog.Copy
	w            *dedupe.Window // nil: no window
	tail, digest uint64
}

// matches reports whether the window describes c's log at tails t.
func (cw *copyWindow) matches(c *streamlog.Copy, t streamlog.Tails) bool {
	return cw != nil && cw.w != nil && cw.c == c && cw.tail == t.Record && cw.digest == t.RecordDigest
}

// forCopy returns the window to lend a role of c: cw if it is c's, else
// a new one, empty and matching if c's log holds no records, and else none
// (pre, a finished prebuild that matches, fills it).
func (cw *copyWindow) forCopy(c *streamlog.Copy, pre *prebuilt) *copyWindow {
	t := c.Tails()
	if cw.matches(c, t) {
		return cw
	}
	out := &copyWindow{c: c}
	switch {
	case t.Record == t.Head:
		out.w = dedupe.New(dedupe.DefaultPerProducer, dedupe.DefaultProducers)
	case pre != nil && pre.c == c && pre.tail == t.Record && pre.digest == t.RecordDigest && pre.finished():
		out.w = pre.w
	}
	out.tail, out.digest = t.Record, t.RecordDigest
	return out
}

// asPrebuilt offers a window that matches c's log to a promotion as a
// finished prebuild; nil otherwise.
func (cw *copyWindow) asPrebuilt(c *streamlog.Copy) *prebuilt {
	if cw == nil {
		return nil
	}
	cw = cw.forCopy(c, nil)
	if cw.w == nil {
		return nil
	}
	done := make(chan struct{})
	close(done)
	return &prebuilt{c: c, tail: cw.tail, digest: cw.digest, done: done, w: cw.w}
}

// applied records records a follower wrote to c at its written tail
// before (Tails.RecordWritten, with its digest): each producer's sequence
// at its offset, when the window matched the log written before them;
// otherwise the window is dropped. It then describes c's log as written
// now. The follower writes ahead of its fsyncs, so the window describes the
// written log; a seal waits for every written record to be durable, and a
// promotion takes the window only if the copy's durable tail and digest
// are the window's (forCopy), so a window counting records that never
// became durable is never used.
func (cw *copyWindow) applied(c *streamlog.Copy, before streamlog.Tails, recs []streamlog.Record, log *slog.Logger) {
	if cw == nil || cw.w == nil || cw.c != c || cw.tail != before.RecordWritten || cw.digest != before.WrittenDigest ||
		len(recs) == 0 || recs[0].Offset != before.RecordWritten {
		if cw != nil {
			cw.w = nil
		}
		return
	}
	for _, r := range recs {
		producer, seq, err := envelope.Producer(r.Data)
		if err != nil {
			log.Warn("duplicate window: undecodable record", "offset", r.Offset, "err", err)
			continue
		}
		if len(producer) > 0 {
			cw.w.RecordBytes(producer, seq, r.Offset)
		}
	}
	t := c.Tails()
	cw.tail, cw.digest = t.RecordWritten, t.WrittenDigest
}

// restarted is called after the follower reset c to its owner's head:
// the log holds no records, so an empty window describes it.
func (cw *copyWindow) restarted(c *streamlog.Copy) {
	t := c.Tails()
	cw.w = nil
	if t.Record == t.Head {
		cw.w = dedupe.New(dedupe.DefaultPerProducer, dedupe.DefaultProducers)
	}
	cw.tail, cw.digest = t.Record, t.RecordDigest
}

// finished reports whether the build ended with a window.
func (p *prebuilt) finished() bool {
	select {
	case <-p.done:
		return p.w != nil
	default:
		return false
	}
}

// window is what a stopped owner leaves its copy: the window it filled at
// its start and recorded every write into since, which describes the log
// as the owner left it. Call only after stop (the appender has ended).
func (o *owner) window() *copyWindow {
	if o.dd == nil || !o.ddFilled {
		return nil
	}
	t := o.c.Tails()
	if t.RecordWritten != t.Record {
		// A write is still in flight (the role stopped waiting for its
		// group commit): the window holds its records, the tail does not
		// yet, so the window describes no log. A promotion builds one.
		return nil
	}
	return &copyWindow{c: o.c, w: o.dd, tail: t.Record, digest: t.RecordDigest}
}
