package heartbeat

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// A host reports its copies in two kinds of heartbeat: a full report lists
// every copy it holds; a delta (wire.Heartbeat.Delta) lists only the copies
// whose fields changed since the host's previous report, the new ones, and
// the ones it no longer holds (wire.CopyStatus.Gone). An idle host's delta
// lists nothing, so what a beat costs its sender, the NATS servers and every
// reader follows what changed, not what the host holds.
//
// The scheme, and why it is sound:
//
//   - Reports are numbered with the beats (wire.Heartbeat.Beat) and each
//     delta names the report it follows (Since). A reader applies a delta
//     only onto that report; any other delta means it missed one (a gap:
//     lost on a reconnect, or the reader started in between) or is late (a
//     reordered message, older than what the reader has: dropped).
//   - After a gap the reader keeps the copies it had (stale, as they were
//     when a whole beat was lost before deltas existed) and applies no delta
//     until the next full report, which replaces everything. The host sends
//     one at least every full-report interval (wire.DefaultFullReportInterval)
//     and as the first report of every incarnation, so a reader is behind at
//     most that long after it missed something. A coordinator that gets a
//     delta without a base asks for a full report (wire.AssignNotice's
//     FullReport; Reporter.AskFull), which the host sends in its next beat,
//     at most one per wire.MinAskedFullReportGap however many ask.
//   - A new incarnation (a restarted host) drops what the reader knew and
//     waits for that incarnation's first report, which is full.
//
// Reporter is the sender's side; Copies is the reader's.

// Reporter turns a host's successive lists of copies into reports: full
// every FullEvery (and the first), deltas between. A delta is built either
// from the full list (Report), or from the copies the host knows may have
// changed (ReportChanged: what a delta costs then follows what changed,
// not what the host holds). It is not safe for concurrent use; the host
// serializes its beats.
type Reporter struct {
	// FullEvery is the longest time between two full reports
	// (wire.DefaultFullReportInterval when zero or less).
	FullEvery time.Duration

	last     map[string]wire.CopyStatus // the copies as last reported
	lastBeat uint64                     // the last report's beat; 0: none yet
	lastFull time.Time
	// asked is set by AskFull: the next report is full.
	asked bool
}

// AskFull makes the next report full (a reader lacks a base for deltas).
func (r *Reporter) AskFull() { r.asked = true }

// FullDue reports whether the next report at now is a full one: the
// first, one asked for, or FullEvery after the last full one.
func (r *Reporter) FullDue(now time.Time) bool {
	every := r.FullEvery
	if every <= 0 {
		every = wire.DefaultFullReportInterval
	}
	return r.lastBeat == 0 || r.asked || now.Sub(r.lastFull) >= every || now.Before(r.lastFull)
}

// Report returns the report to send for hb, a heartbeat listing every copy
// the host holds (hb.Beat set, Delta unset), at now: hb itself when a full
// report is due (FullDue), otherwise the delta since the previous report.
// It remembers hb's copies as reported: a report the caller then fails to
// send is a gap readers recover from at the next full report. Its cost is
// a lookup of each of hb's copies among those last reported.
func (r *Reporter) Report(hb wire.Heartbeat, now time.Time) wire.Heartbeat {
	if r.FullDue(now) {
		r.last = make(map[string]wire.CopyStatus, len(hb.Copies))
		for _, cs := range hb.Copies {
			r.last[cs.Stream] = cs
		}
		r.lastBeat, r.lastFull, r.asked = hb.Beat, now, false
		hb.Delta, hb.Since = false, 0
		return hb
	}
	cands := hb.Copies
	held := 0 // of cands, those last reported
	for _, cs := range cands {
		if _, ok := r.last[cs.Stream]; ok {
			held++
		}
	}
	if held < len(r.last) {
		// Some copies last reported are no longer listed: gone.
		listed := make(map[string]struct{}, len(cands))
		for _, cs := range cands {
			listed[cs.Stream] = struct{}{}
		}
		cands = slices.Clone(cands)
		for _, name := range slices.Sorted(maps.Keys(r.last)) {
			if _, ok := listed[name]; !ok {
				cands = append(cands, wire.CopyStatus{Stream: name, Gone: true})
			}
		}
	}
	hb.Copies = cands
	return r.reportChanged(hb)
}

// ReportChanged returns the delta to send for hb, a heartbeat that lists
// the copies that may have changed since the previous report (hb.Beat set,
// Delta unset): each with its current status, or with Gone set for one the
// host no longer holds (only Stream is read). It lists those that differ
// from what was last reported, and remembers them as reported. When a full
// report is due (FullDue) it returns ok false and remembers nothing: hb
// lists only some copies, and sent as a full report it would make every
// reader drop the others, so the caller builds every copy's status and
// calls Report instead (found by review: it used to return hb as a full
// report). A copy that changed without being listed here is reported by
// the next full report (the host's safety net for a change it failed to
// notice).
func (r *Reporter) ReportChanged(hb wire.Heartbeat, now time.Time) (delta wire.Heartbeat, ok bool) {
	if r.FullDue(now) {
		return hb, false
	}
	return r.reportChanged(hb), true
}

// reportChanged is ReportChanged once no full report is due.
func (r *Reporter) reportChanged(hb wire.Heartbeat) wire.Heartbeat {
	since := r.lastBeat
	r.lastBeat = hb.Beat
	changed := []wire.CopyStatus{}
	var gone []wire.CopyStatus
	for _, cs := range hb.Copies {
		prev, ok := r.last[cs.Stream]
		switch {
		case cs.Gone:
			if ok {
				delete(r.last, cs.Stream)
				gone = append(gone, wire.CopyStatus{Stream: prev.Stream, StreamID: prev.StreamID, Role: wire.RoleNone, Gone: true})
			}
		case !ok || prev != cs:
			r.last[cs.Stream] = cs
			changed = append(changed, cs)
		}
	}
	slices.SortFunc(changed, byStreamName)
	slices.SortFunc(gone, byStreamName)
	hb.Copies = append(changed, gone...)
	hb.Delta, hb.Since = true, since
	return hb
}

// Copies is one host's copies as a reader rebuilds them from the host's
// whole reports (full or delta, as the Assembler returns them). The zero
// value knows nothing. It is not safe for concurrent use.
type Copies struct {
	incarnation uint64
	beat        uint64 // the last report applied
	synced      bool   // the copies are the host's as of report beat
	copies      map[string]wire.CopyStatus
	// list is copies sorted by stream name as List last returned it, and
	// pending the changes of the deltas applied since, in order; listed
	// says list is kept. List merges pending into a new list (a copy of
	// it, and the changes sorted and placed) rather than sorting every
	// name again: at thousands of copies a host's beats in a failover
	// change hundreds, and the attention service sorted them all on every
	// beat (issue 17). A full report or a reset drops the list, as do
	// more changes pending than copies (a reader that never lists keeps
	// none); List builds it again then. The slice is shared with List's
	// callers and never modified.
	list    []wire.CopyStatus
	pending []wire.CopyStatus
	listed  bool
}

// Apply applies a whole report and reports whether the copies changed
// (they are then the host's as of hb). A delta that does not follow the
// last report applied is not applied: the copies stay as they are until
// the next full report. A report of another incarnation first drops every
// copy known. Liveness beats are not reports: they change nothing.
func (c *Copies) Apply(hb wire.Heartbeat) bool {
	if hb.Live {
		return false
	}
	if hb.Incarnation != c.incarnation {
		c.Reset(hb.Incarnation)
	}
	if !hb.Delta {
		if c.beat != 0 && hb.Beat <= c.beat && hb.Beat != 0 {
			return false // an older report, late
		}
		c.copies = make(map[string]wire.CopyStatus, len(hb.Copies))
		for _, cs := range hb.Copies {
			c.copies[cs.Stream] = cs
		}
		c.beat, c.synced = hb.Beat, true
		c.dropList()
		return true
	}
	if hb.Beat <= c.beat {
		return false // a late delta: what it says is in the copies already
	}
	if !c.synced || hb.Since != c.beat {
		c.synced = false // a gap: wait for the next full report
		return false
	}
	for _, cs := range hb.Copies {
		if cs.Gone {
			delete(c.copies, cs.Stream)
		} else {
			c.copies[cs.Stream] = cs
		}
	}
	if c.listed {
		c.pending = append(c.pending, hb.Copies...)
		if len(c.pending) > len(c.copies) {
			c.dropList()
		}
	}
	c.beat = hb.Beat
	return true
}

// Reset drops every copy known, for a host now running as incarnation.
func (c *Copies) Reset(incarnation uint64) {
	*c = Copies{incarnation: incarnation}
}

// Synced reports whether the copies are the host's as of its last report
// applied (false before the first full report and after a gap).
func (c *Copies) Synced() bool { return c.synced }

// Map returns the copies by stream name. The map is the Copies' own:
// callers must not modify it, nor keep it past the next Apply or Reset.
func (c *Copies) Map() map[string]wire.CopyStatus { return c.copies }

// Clone returns a copy of the copies by stream name (nil if none known).
func (c *Copies) Clone() map[string]wire.CopyStatus { return maps.Clone(c.copies) }

// List returns the copies sorted by stream name (empty, never nil). The
// slice is shared: callers must not modify it. Later Applies do not change
// it; the next List after a change returns a new slice.
func (c *Copies) List() []wire.CopyStatus {
	if c.listed && len(c.pending) > 0 {
		c.list, c.pending = mergeChanges(c.list, c.pending), nil
	}
	if !c.listed {
		out := make([]wire.CopyStatus, 0, len(c.copies))
		for _, name := range slices.Sorted(maps.Keys(c.copies)) {
			out = append(out, c.copies[name])
		}
		c.list, c.pending, c.listed = out, nil, true
	}
	return c.list
}

// dropList forgets the sorted list; List builds it again.
func (c *Copies) dropList() { c.list, c.pending, c.listed = nil, nil, false }

func byStreamName(a, b wire.CopyStatus) int { return cmp.Compare(a.Stream, b.Stream) }

// mergeChanges returns a new list: sorted, one copy per stream, with the
// changes (of one delta or several, in order) applied to it as Apply
// applies them to the map (a copy with Gone set is dropped, any other
// replaces or joins; of several entries for one stream the last counts).
// sorted is not modified.
func mergeChanges(sorted, changed []wire.CopyStatus) []wire.CopyStatus {
	changes := slices.Clone(changed)
	slices.SortStableFunc(changes, byStreamName)
	out := make([]wire.CopyStatus, 0, len(sorted)+len(changes))
	i := 0
	for k, cs := range changes {
		if k+1 < len(changes) && changes[k+1].Stream == cs.Stream {
			continue // a later entry for the same stream counts
		}
		j, _ := slices.BinarySearchFunc(sorted[i:], cs.Stream, func(e wire.CopyStatus, name string) int { return cmp.Compare(e.Stream, name) })
		out = append(out, sorted[i:i+j]...)
		i += j
		if i < len(sorted) && sorted[i].Stream == cs.Stream {
			i++ // replaced or dropped
		}
		if !cs.Gone {
			out = append(out, cs)
		}
	}
	return append(out, sorted[i:]...)
}
