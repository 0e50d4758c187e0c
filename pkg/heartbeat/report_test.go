package heartbeat

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// host simulates a host's copies changing from beat to beat, and keeps
// every beat's full list, so a reader's rebuilt view can be compared with
// what full reports alone would have given it.
type host struct {
	rng         *rand.Rand
	incarnation uint64
	beat        uint64
	copies      map[string]wire.CopyStatus
	rep         Reporter
	now         time.Time
	full        map[uint64]map[string]wire.CopyStatus // beat -> every copy then
}

func newHost(seed uint64, incarnation uint64, fullEvery time.Duration) *host {
	return &host{rng: rand.New(rand.NewPCG(seed, incarnation)), incarnation: incarnation,
		copies: map[string]wire.CopyStatus{}, rep: Reporter{FullEvery: fullEvery},
		now: time.Unix(1000, 0), full: map[uint64]map[string]wire.CopyStatus{}}
}

// step changes a few copies (tails move, roles change, copies come and
// go) and returns the next report, in parts of at most 3 copies.
func (h *host) step() []wire.Heartbeat {
	for range h.rng.IntN(4) {
		name := fmt.Sprintf("s%02d", h.rng.IntN(30))
		c, ok := h.copies[name]
		switch {
		case !ok:
			h.copies[name] = wire.CopyStatus{Stream: name, StreamID: h.rng.Uint64N(3) + 1, Role: wire.RoleFollower, Epoch: 1}
		case h.rng.IntN(5) == 0:
			delete(h.copies, name)
		case h.rng.IntN(3) == 0:
			c.Role, c.Epoch = wire.RoleOwner, c.Epoch+1
			h.copies[name] = c
		default:
			c.RecordTail++
			c.Confirmed = c.RecordTail
			h.copies[name] = c
		}
	}
	h.beat++
	h.now = h.now.Add(500 * time.Millisecond)
	hb := wire.Heartbeat{Node: "h", Incarnation: h.incarnation, Beat: h.beat, AtMS: h.now.UnixMilli(), Copies: []wire.CopyStatus{}}
	for _, name := range sortedNames(h.copies) {
		hb.Copies = append(hb.Copies, h.copies[name])
	}
	h.full[h.beat] = maps.Clone(h.copies)
	return Split(h.rep.Report(hb, h.now), maxHeaderBytes+3*maxCopyBytes)
}

func sortedNames(m map[string]wire.CopyStatus) []string {
	var out []string
	for _, c := range (&Copies{copies: m}).List() {
		out = append(out, c.Stream)
	}
	return out
}

// reader is one receiver: an Assembler and the rebuilt copies.
type reader struct {
	asm    *Assembler
	copies Copies
}

func newReader() *reader { return &reader{asm: NewAssembler()} }

func (r *reader) add(hb wire.Heartbeat) {
	if whole, ok := r.asm.Add(hb); ok {
		r.copies.Apply(whole)
	}
}

// check fails unless the reader, when it says it is in step, holds exactly
// the host's copies as of the last report it applied.
func (r *reader) check(t *testing.T, h *host, what string) {
	t.Helper()
	if !r.copies.Synced() || r.copies.incarnation != h.incarnation {
		return
	}
	want := h.full[r.copies.beat]
	if !maps.Equal(r.copies.Map(), want) {
		t.Fatalf("%s: at report %d the reader holds %v, the host held %v", what, r.copies.beat, r.copies.Map(), want)
	}
	if got, wantList := r.copies.List(), sortedCopies(want); !slices.Equal(got, wantList) {
		t.Fatalf("%s: at report %d the reader lists %v, the host held %v", what, r.copies.beat, got, wantList)
	}
}

// sortedCopies is m's copies sorted by stream name, built on its own (not
// by Copies.List).
func sortedCopies(m map[string]wire.CopyStatus) []wire.CopyStatus {
	out := []wire.CopyStatus{}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[name])
	}
	return out
}

// List follows every delta applied, whatever the delta lists: copies that
// change, join or go, streams it names twice (the last entry counts, as
// in the map), and gone copies it never held. A list returned earlier is
// never changed by a later delta (its callers share it), whether or not
// the list was asked for in between.
func TestListFollowsDeltas(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for seed := range 50 {
		var c Copies
		full := wire.Heartbeat{Incarnation: 1, Beat: 1, Copies: []wire.CopyStatus{}}
		for i := range rng.IntN(40) {
			full.Copies = append(full.Copies, wire.CopyStatus{Stream: fmt.Sprintf("s%02d", i*2), RecordTail: uint64(i)})
		}
		if !c.Apply(full) {
			t.Fatal("full report not applied")
		}
		before := c.List()
		for beat := uint64(2); beat < 40; beat++ {
			kept := slices.Clone(before)
			delta := wire.Heartbeat{Incarnation: 1, Beat: beat, Since: beat - 1, Delta: true}
			for range rng.IntN(8) {
				cs := wire.CopyStatus{Stream: fmt.Sprintf("s%02d", rng.IntN(90)), RecordTail: rng.Uint64N(100)}
				cs.Gone = rng.IntN(3) == 0
				delta.Copies = append(delta.Copies, cs)
			}
			if !c.Apply(delta) {
				t.Fatalf("seed %d beat %d: delta not applied", seed, beat)
			}
			if !slices.Equal(before, kept) {
				t.Fatalf("seed %d beat %d: a delta changed a list returned before it", seed, beat)
			}
			if rng.IntN(3) == 0 {
				continue // not listed: the next list takes several deltas' changes at once
			}
			before = c.List()
			if want := sortedCopies(c.Map()); !slices.Equal(before, want) {
				t.Fatalf("seed %d beat %d: after %v the list is\n%v\nwant\n%v", seed, beat, delta.Copies, before, want)
			}
		}
	}
}

// BenchmarkListAfterDelta is a reader's List after each delta (an
// attention service's watcher does one per host beat) at a host of 7,500
// copies whose beats each change 200 of them, as in a 10,000-stream
// failover: "merged" keeps the sorted list across deltas, "sorted" builds
// it again (the cost before the merge).
func BenchmarkListAfterDelta(b *testing.B) {
	const n, changed = 7500, 200
	full := wire.Heartbeat{Incarnation: 1, Beat: 1, Copies: make([]wire.CopyStatus, 0, n)}
	for i := range n {
		full.Copies = append(full.Copies, wire.CopyStatus{Stream: fmt.Sprintf("stream-%06d", i), Role: wire.RoleFollower})
	}
	for _, mode := range []string{"merged", "sorted"} {
		b.Run(mode, func(b *testing.B) {
			var c Copies
			c.Apply(full)
			rng := rand.New(rand.NewPCG(1, 2))
			beat := uint64(1)
			for b.Loop() {
				beat++
				delta := wire.Heartbeat{Incarnation: 1, Beat: beat, Since: beat - 1, Delta: true, Copies: make([]wire.CopyStatus, 0, changed)}
				for range changed {
					delta.Copies = append(delta.Copies, wire.CopyStatus{Stream: fmt.Sprintf("stream-%06d", rng.IntN(n)), RecordTail: beat})
				}
				c.Apply(delta)
				if mode == "sorted" {
					c.dropList()
				}
				if len(c.List()) != n {
					b.Fatal("copies lost")
				}
			}
		})
	}
}

// A reader that gets every message in order rebuilds, at every report,
// exactly the copies a full report would have listed; a reader that loses
// or reorders messages is never wrong while in step, and is in step again
// with the host after the next full report.
func TestDeltasRebuildTheFullView(t *testing.T) {
	for seed := range uint64(20) {
		h := newHost(seed, 1, 5*time.Second) // a full report every 10 beats
		inOrder, lossy := newReader(), newReader()
		var held []wire.Heartbeat // messages the lossy transport delays
		for i := range 200 {
			parts := h.step()
			for _, p := range parts {
				inOrder.add(p)
				switch x := h.rng.IntN(10); {
				case x == 0: // lost
				case x <= 2: // delayed past later messages
					held = append(held, p)
				default:
					lossy.add(p)
				}
				if len(held) > 0 && h.rng.IntN(3) == 0 {
					k := h.rng.IntN(len(held))
					lossy.add(held[k])
					held = append(held[:k], held[k+1:]...)
				}
			}
			inOrder.check(t, h, fmt.Sprintf("seed %d beat %d in order", seed, i))
			if !inOrder.copies.Synced() || inOrder.copies.beat != h.beat {
				t.Fatalf("seed %d beat %d: the in-order reader is not at the host's report (%d, synced %v)",
					seed, h.beat, inOrder.copies.beat, inOrder.copies.Synced())
			}
			lossy.check(t, h, fmt.Sprintf("seed %d beat %d lossy", seed, i))
		}
		// Every message from now on arrives: after the next full report
		// the lossy reader is in step again.
		for !lossy.copies.Synced() || lossy.copies.beat != h.beat {
			for _, p := range h.step() {
				lossy.add(p)
			}
			if h.beat > 300 {
				t.Fatalf("seed %d: the lossy reader never got in step again", seed)
			}
		}
		lossy.check(t, h, fmt.Sprintf("seed %d after recovery", seed))
	}
}

// A restarted reader applies no delta (it has no report to apply it
// onto) until a full report; a restarted host (a new incarnation) makes
// every reader drop what it knew, and its first report is full.
func TestDeltasAfterRestarts(t *testing.T) {
	h := newHost(7, 1, 5*time.Second)
	r := newReader()
	for range 12 {
		for _, p := range h.step() {
			r.add(p)
		}
	}
	r.check(t, h, "before the restarts")

	late := newReader() // a reader started now
	for i := 0; ; i++ {
		parts := h.step()
		for _, p := range parts {
			late.add(p)
			r.add(p)
		}
		if !parts[0].Delta {
			break
		}
		if late.copies.Synced() || len(late.copies.Map()) != 0 {
			t.Fatalf("a reader started after the full report applied a delta: %v", late.copies.Map())
		}
		if i > 20 {
			t.Fatal("no full report in 20 beats")
		}
	}
	late.check(t, h, "new reader after the full report")
	if !late.copies.Synced() {
		t.Fatal("a new reader is not in step after a full report")
	}

	h2 := newHost(8, 2, 5*time.Second) // the host restarted, on an empty disk
	first := h2.step()
	if first[0].Delta {
		t.Fatal("a new incarnation's first report is a delta")
	}
	for _, p := range first {
		r.add(p)
	}
	r.check(t, h2, "after the host restarted")
	if !r.copies.Synced() || !maps.Equal(r.copies.Map(), h2.full[1]) {
		t.Fatalf("after the host restarted the reader holds %v, want %v", r.copies.Map(), h2.full[1])
	}
	// A late delta of the old incarnation drops the new one's copies
	// (the reader cannot tell which incarnation is newer) and is not
	// applied; the new incarnation's next full report restores them.
	r.add(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 99, Delta: true, Since: 98, Copies: []wire.CopyStatus{}})
	if r.copies.Synced() {
		t.Fatal("in step after a delta of another incarnation")
	}
}

// The Reporter's reports: the first is full, then only changes (gone
// copies marked), then full again once FullEvery has passed.
func TestReporterReports(t *testing.T) {
	rep := Reporter{FullEvery: time.Second}
	at := time.Unix(1, 0)
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner, Epoch: 1}
	b := wire.CopyStatus{Stream: "b", StreamID: 2, Role: wire.RoleFollower, Epoch: 1}
	r1 := rep.Report(wire.Heartbeat{Beat: 1, Copies: []wire.CopyStatus{a, b}}, at)
	if r1.Delta || len(r1.Copies) != 2 {
		t.Fatalf("first report %+v", r1)
	}
	r2 := rep.Report(wire.Heartbeat{Beat: 3, Copies: []wire.CopyStatus{a, b}}, at.Add(100*time.Millisecond))
	if !r2.Delta || r2.Since != 1 || len(r2.Copies) != 0 {
		t.Fatalf("unchanged report %+v", r2)
	}
	a2 := a
	a2.RecordTail = 5
	r3 := rep.Report(wire.Heartbeat{Beat: 4, Copies: []wire.CopyStatus{a2}}, at.Add(200*time.Millisecond))
	want := []wire.CopyStatus{a2, {Stream: "b", StreamID: 2, Role: wire.RoleNone, Gone: true}}
	if !r3.Delta || r3.Since != 3 || fmt.Sprint(r3.Copies) != fmt.Sprint(want) {
		t.Fatalf("changed report %+v, want copies %v", r3, want)
	}
	r4 := rep.Report(wire.Heartbeat{Beat: 6, Copies: []wire.CopyStatus{a2}}, at.Add(time.Second))
	if r4.Delta || r4.Since != 0 || len(r4.Copies) != 1 {
		t.Fatalf("report after FullEvery %+v", r4)
	}
	// Asked for, the next report is full, and only that one.
	rep.AskFull()
	if r5 := rep.Report(wire.Heartbeat{Beat: 7, Copies: []wire.CopyStatus{a2}}, at.Add(1100*time.Millisecond)); r5.Delta || len(r5.Copies) != 1 {
		t.Fatalf("asked-for report %+v", r5)
	}
	if r6 := rep.Report(wire.Heartbeat{Beat: 8, Copies: []wire.CopyStatus{a2}}, at.Add(1200*time.Millisecond)); !r6.Delta || r6.Since != 7 {
		t.Fatalf("report after the asked-for one %+v", r6)
	}
}

// ReportChanged lists exactly the listed copies that differ from what was
// last reported (new ones included), marks gone only those that had been
// reported, and a later full report lists what a delta never did.
func TestReportChangedListsExactlyTheChanged(t *testing.T) {
	rep := Reporter{FullEvery: time.Second}
	at := time.Unix(1, 0)
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner, Epoch: 1}
	b := wire.CopyStatus{Stream: "b", StreamID: 2, Role: wire.RoleFollower, Epoch: 1}
	c := wire.CopyStatus{Stream: "c", StreamID: 3, Role: wire.RoleFollower, Epoch: 1}
	if !rep.FullDue(at) {
		t.Fatal("the first report is not due full")
	}
	rep.Report(wire.Heartbeat{Beat: 1, Copies: []wire.CopyStatus{a, b, c}}, at)
	if rep.FullDue(at.Add(100 * time.Millisecond)) {
		t.Fatal("a full report due 100ms after one")
	}
	b2, d := b, wire.CopyStatus{Stream: "d", StreamID: 4, Role: wire.RoleFollower}
	b2.RecordTail = 7
	// a unchanged, b changed, c gone, d new, e gone but never reported.
	hb, ok := rep.ReportChanged(wire.Heartbeat{Beat: 2, Copies: []wire.CopyStatus{d, a, b2, {Stream: "c", Gone: true}, {Stream: "e", Gone: true}}},
		at.Add(100*time.Millisecond))
	want := []wire.CopyStatus{b2, d, {Stream: "c", StreamID: 3, Role: wire.RoleNone, Gone: true}}
	if !ok || !hb.Delta || hb.Since != 1 || fmt.Sprint(hb.Copies) != fmt.Sprint(want) {
		t.Fatalf("delta %+v (ok %v), want since 1 and copies %v", hb, ok, want)
	}
	// Listed again unchanged: nothing.
	if hb, ok := rep.ReportChanged(wire.Heartbeat{Beat: 3, Copies: []wire.CopyStatus{b2, d}}, at.Add(200*time.Millisecond)); !ok || !hb.Delta || hb.Since != 2 || len(hb.Copies) != 0 {
		t.Fatalf("delta of unchanged copies %+v", hb)
	}
	// A change never listed (a2) is in the next full report.
	a2 := a
	a2.RecordTail = 9
	if !rep.FullDue(at.Add(time.Second)) {
		t.Fatal("no full report due FullEvery after the last")
	}
	full := rep.Report(wire.Heartbeat{Beat: 4, Copies: []wire.CopyStatus{a2, b2, d}}, at.Add(time.Second))
	if full.Delta || fmt.Sprint(full.Copies) != fmt.Sprint([]wire.CopyStatus{a2, b2, d}) {
		t.Fatalf("full report %+v", full)
	}
}

// A host of 5,000 copies of which 10 changed sends a delta a few hundred
// times smaller than its full report.
func BenchmarkReportDelta(b *testing.B) {
	copies := testCopies(5000, 100)
	// Sorted by stream, as a host lists them.
	slices.SortFunc(copies, func(a, b wire.CopyStatus) int { return strings.Compare(a.Stream, b.Stream) })
	rep := Reporter{FullEvery: time.Hour}
	rep.Report(wire.Heartbeat{Beat: 1, Copies: copies}, time.Unix(1, 0))
	next := append([]wire.CopyStatus(nil), copies...)
	for i := range 10 {
		next[i*400].RecordTail++
	}
	beat := uint64(1)
	for b.Loop() {
		beat++
		next[0].RecordTail++
		if hb := rep.Report(wire.Heartbeat{Beat: beat, Copies: next}, time.Unix(2, 0)); !hb.Delta {
			b.Fatal("not a delta")
		}
	}
}

// The same host's delta built from the copies marked changed (11 of
// 5,000), as the host builds it between full reports.
// TestReportChangedRefusesWhenAFullReportIsDue: a list of the changed
// copies must never go out as a full report, which would make every reader
// drop the copies it does not list (found by review).
func TestReportChangedRefusesWhenAFullReportIsDue(t *testing.T) {
	var rep Reporter
	at := time.Unix(1, 0)
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner}
	b := wire.CopyStatus{Stream: "b", StreamID: 2, Role: wire.RoleFollower}
	rep.Report(wire.Heartbeat{Beat: 1, Copies: []wire.CopyStatus{a, b}}, at)
	rep.AskFull()
	b.RecordTail = 3
	if hb, ok := rep.ReportChanged(wire.Heartbeat{Beat: 2, Copies: []wire.CopyStatus{b}}, at.Add(100*time.Millisecond)); ok {
		t.Fatalf("a full report is due, yet a list of one changed copy went out: %+v", hb)
	}
	// Nothing was remembered: the full report still follows beat 1.
	full := rep.Report(wire.Heartbeat{Beat: 2, Copies: []wire.CopyStatus{a, b}}, at.Add(100*time.Millisecond))
	if full.Delta || len(full.Copies) != 2 {
		t.Fatalf("the report after the refusal %+v, want a full report of both copies", full)
	}
}

func BenchmarkReportChanged(b *testing.B) {
	copies := testCopies(5000, 100)
	rep := Reporter{FullEvery: time.Hour}
	rep.Report(wire.Heartbeat{Beat: 1, Copies: copies}, time.Unix(1, 0))
	var marked []wire.CopyStatus
	for i := range 10 {
		cs := copies[i*400]
		cs.RecordTail++
		marked = append(marked, cs)
	}
	marked = append(marked, copies[1])
	beat := uint64(1)
	for b.Loop() {
		beat++
		marked[0].RecordTail++
		if hb, ok := rep.ReportChanged(wire.Heartbeat{Beat: beat, Copies: marked}, time.Unix(2, 0)); !ok || !hb.Delta {
			b.Fatal("not a delta")
		}
	}
}
