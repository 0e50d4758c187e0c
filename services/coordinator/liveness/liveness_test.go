package liveness

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestSplitBeatRefreshesLifeAndReplacesCopiesWhenWhole feeds the tracker a
// beat in parts: every part must count as proof of life, and the copies
// must stay those of the last whole beat until the new beat is complete.
func TestSplitBeatRefreshesLifeAndReplacesCopiesWhenWhole(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	copies := func(tail uint64) []wire.CopyStatus {
		out := make([]wire.CopyStatus, 40)
		for i := range out {
			out[i] = wire.CopyStatus{Stream: fmt.Sprintf("s%02d", i), StreamID: uint64(i + 1), Role: wire.RoleFollower, Epoch: 1, RecordTail: tail}
		}
		return out
	}
	if !tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 1, Copies: copies(10)}, t0) {
		t.Fatal("a new node's first heartbeat is not notable")
	}
	parts := heartbeat.Split(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 2, Copies: copies(20)}, 4096)
	if len(parts) < 3 {
		t.Fatalf("%d parts, want at least 3", len(parts))
	}
	for i, p := range parts {
		at := t0.Add(time.Duration(i+1) * time.Second)
		tr.Heartbeat(p, at)
		s := tr.View()["h"]
		if !s.LastSeen.Equal(at) {
			t.Fatalf("part %d: last seen %v, want %v", i, s.LastSeen, at)
		}
		want := uint64(10)
		if i == len(parts)-1 {
			want = 20
		}
		if len(s.Copies) != 40 {
			t.Fatalf("part %d: %d copies, want 40", i, len(s.Copies))
		}
		for name, c := range s.Copies {
			if c.RecordTail != want {
				t.Fatalf("part %d: copy %s has tail %d, want %d", i, name, c.RecordTail, want)
			}
		}
	}
}

// A restarted host's first part must not leave the old process's copies
// standing under the new incarnation.
func TestNewIncarnationDropsTheOldCopies(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	old := []wire.CopyStatus{{Stream: "s", StreamID: 1, Role: wire.RoleOwner, Epoch: 1, RecordTail: 500}}
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 9, Copies: old}, t0)
	copies := make([]wire.CopyStatus, 40)
	for i := range copies {
		copies[i] = wire.CopyStatus{Stream: fmt.Sprintf("s%02d", i), StreamID: uint64(i + 1), Role: wire.RoleNone}
	}
	parts := heartbeat.Split(wire.Heartbeat{Node: "h", Incarnation: 2, Beat: 1, Copies: copies}, 4096)
	tr.Heartbeat(parts[0], t0.Add(time.Second))
	if s := tr.View()["h"]; s.Incarnation != 2 || len(s.Copies) != 0 {
		t.Fatalf("after the first part of a new incarnation: incarnation %d, %d copies; want 2 and none", s.Incarnation, len(s.Copies))
	}
	for _, p := range parts[1:] {
		tr.Heartbeat(p, t0.Add(2*time.Second))
	}
	if s := tr.View()["h"]; len(s.Copies) != 40 {
		t.Fatalf("%d copies once the beat is whole, want 40", len(s.Copies))
	}
}

// ViewStream is View with only the one stream's copy of each node.
func TestViewStream(t *testing.T) {
	tr := New()
	now := time.Unix(1_000, 0)
	tr.Heartbeat(wire.Heartbeat{Node: "a", Incarnation: 1, Beat: 1, Copies: []wire.CopyStatus{
		{Stream: "s", StreamID: 1, Role: wire.RoleOwner, Epoch: 2, RecordTail: 7},
		{Stream: "t", StreamID: 2, Role: wire.RoleFollower, Epoch: 1},
	}}, now)
	tr.Heartbeat(wire.Heartbeat{Node: "b", Incarnation: 1, Beat: 1, Copies: []wire.CopyStatus{
		{Stream: "t", StreamID: 2, Role: wire.RoleOwner, Epoch: 1},
	}}, now)
	v := tr.ViewStream("s")
	if len(v) != 2 || !v["a"].LastSeen.Equal(now) || !v["b"].LastSeen.Equal(now) {
		t.Fatalf("view of s: %+v, want both nodes seen at %v", v, now)
	}
	if c, ok := v["a"].Copies["s"]; !ok || c.RecordTail != 7 || len(v["a"].Copies) != 1 {
		t.Fatalf("a's copies in the view of s: %+v, want only s at tail 7", v["a"].Copies)
	}
	if len(v["b"].Copies) != 0 {
		t.Fatalf("b's copies in the view of s: %+v, want none", v["b"].Copies)
	}
	// The view is a copy.
	v["a"].Copies["s"] = wire.CopyStatus{}
	if c := tr.ViewStream("s")["a"].Copies["s"]; c.RecordTail != 7 {
		t.Fatalf("changing the view changed the tracker: %+v", c)
	}
}

// ViewStreams and ViewSealed are View cut down: for random reports, each
// node's copies in them are exactly View's copies of the named streams,
// and of the sealed ones; liveness is View's.
func TestViewStreamsAndViewSealedCutTheFullView(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 100 {
		tr := New()
		now := time.Unix(1_000, 0)
		for n := range 1 + r.IntN(4) {
			var copies []wire.CopyStatus
			for i := range 20 {
				if r.IntN(2) == 0 {
					copies = append(copies, wire.CopyStatus{Stream: fmt.Sprintf("s%d", i), StreamID: uint64(i + 1),
						Role: wire.RoleFollower, Epoch: 1, Sealed: r.IntN(4) == 0, RecordTail: uint64(r.IntN(9))})
				}
			}
			tr.Heartbeat(wire.Heartbeat{Node: fmt.Sprintf("n%d", n), Incarnation: 1, Beat: 1, Copies: copies}, now)
		}
		names := map[string]bool{}
		for i := range 20 {
			if r.IntN(3) == 0 {
				names[fmt.Sprintf("s%d", i)] = true
			}
		}
		full := tr.View()
		cut := func(keep func(string, wire.CopyStatus) bool) map[string]Seen {
			out := map[string]Seen{}
			for id, s := range full {
				var cs map[string]wire.CopyStatus
				for name, c := range s.Copies {
					if keep(name, c) {
						if cs == nil {
							cs = map[string]wire.CopyStatus{}
						}
						cs[name] = c
					}
				}
				s.Copies = cs
				out[id] = s
			}
			return out
		}
		if got, want := tr.ViewStreams(maps.Keys(names)), cut(func(n string, _ wire.CopyStatus) bool { return names[n] }); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: ViewStreams(%v) = %+v, want %+v", round, names, got, want)
		}
		if got, want := tr.ViewSealed(), cut(func(_ string, c wire.CopyStatus) bool { return c.Sealed }); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: ViewSealed = %+v, want %+v", round, got, want)
		}
	}
}

// A liveness beat is proof of life and keeps the copies of the last full
// beat: its empty copies are not a report that the host holds none.
func TestLivenessBeatKeepsCopies(t *testing.T) {
	tr := New()
	t0 := time.Unix(100, 0)
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 1, Copies: []wire.CopyStatus{{Stream: "s", StreamID: 1}}}, t0)
	tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 2, Live: true, Copies: []wire.CopyStatus{}, ConnServer: "S", ConnID: 7}, t0.Add(time.Second))
	s := tr.View()["h1"]
	if _, ok := s.Copies["s"]; !ok || len(s.Copies) != 1 {
		t.Fatalf("copies after a liveness beat: %v", s.Copies)
	}
	if !s.LastSeen.Equal(t0.Add(time.Second)) || s.Conn != (Conn{Server: "S", ID: 7}) {
		t.Fatalf("a liveness beat is not proof of life: %+v", s)
	}
}

// The tracker's view of a host that reports deltas is the view full
// reports would give: a delta updates the copies of the report it follows,
// a delta after a missed one changes nothing (the copies stay as they
// were) until the next full report, and a View taken before a delta does
// not change with it.
func TestDeltaReportsRebuildTheCopies(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	a := wire.CopyStatus{Stream: "a", StreamID: 1, Role: wire.RoleOwner, Epoch: 1, RecordTail: 5}
	b := wire.CopyStatus{Stream: "b", StreamID: 2, Role: wire.RoleFollower, Epoch: 1}
	rep := heartbeat.Reporter{FullEvery: time.Hour}
	send := func(beat uint64, at time.Time, cs ...wire.CopyStatus) wire.Heartbeat {
		hb := rep.Report(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: beat, Copies: cs}, at)
		return hb
	}
	tr.Heartbeat(send(1, t0, a, b), t0)
	before := tr.View()["h"]
	a2 := a
	a2.RecordTail = 9
	if hb := send(2, t0.Add(time.Second), a2); !hb.Delta {
		t.Fatal("not a delta")
	} else {
		tr.Heartbeat(hb, t0.Add(time.Second))
	}
	got := tr.View()["h"].Copies
	if len(got) != 1 || got["a"] != a2 {
		t.Fatalf("after the delta: %v, want a at tail 9 and b gone", got)
	}
	if len(before.Copies) != 2 || before.Copies["a"] != a {
		t.Fatalf("an earlier View changed with the delta: %v", before.Copies)
	}
	// Beat 3's delta is lost: beat 4's follows it, so it is not applied.
	send(3, t0.Add(2*time.Second), a2, b)
	a3 := a2
	a3.RecordTail = 12
	tr.Heartbeat(send(4, t0.Add(3*time.Second), a3, b), t0.Add(3*time.Second))
	if got := tr.View()["h"].Copies; len(got) != 1 || got["a"] != a2 {
		t.Fatalf("after a gap: %v, want the copies as before the gap", got)
	}
	rep.FullEvery = time.Nanosecond // the next report is full
	tr.Heartbeat(send(5, t0.Add(4*time.Second), a3, b), t0.Add(4*time.Second))
	if got := tr.View()["h"].Copies; len(got) != 2 || got["a"] != a3 || got["b"] != b {
		t.Fatalf("after the full report: %v", got)
	}
}

// TestBeatOnTheClosedConnectionDoesNotClearTheAdvisory: a host beats on a
// connection of its own, naming its main connection A. A beat built before
// A was closed, still in flight when the advisory about A is processed,
// arrives after it; it says nothing about the host now and must not clear
// the disconnect (which would leave detection to the TTL). A beat naming
// the new connection B does.
func TestBeatOnTheClosedConnectionDoesNotClearTheAdvisory(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	a := Conn{Server: "NSERVER1", ID: 7}
	b := Conn{Server: "NSERVER1", ID: 9}
	beat := func(n uint64, c Conn, at time.Time) bool {
		return tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: n, Live: true, ConnServer: c.Server, ConnID: c.ID}, at)
	}
	beat(1, a, t0)
	if !tr.Disconnected("h", a, t0.Add(100*time.Millisecond)) {
		t.Fatal("the advisory about the host's connection did not count")
	}
	if beat(2, a, t0.Add(120*time.Millisecond)) {
		t.Fatal("a beat naming the closed connection is notable")
	}
	if s := tr.View()["h"]; !s.DisconnectedAt.Equal(t0.Add(100*time.Millisecond)) || s.HeardSinceDisconnect() {
		t.Fatalf("a beat naming the closed connection cleared the advisory (disconnected at %v, heard since %v)",
			s.DisconnectedAt, s.HeardSinceDisconnect())
	}
	// A message that arrived and is not decoded yet may be the reconnect.
	tr.Touch("h", t0.Add(125*time.Millisecond))
	if s := tr.View()["h"]; !s.HeardSinceDisconnect() {
		t.Fatal("a message not decoded yet, after the stale beat, does not hold the advisory")
	}
	if !beat(3, b, t0.Add(130*time.Millisecond)) {
		t.Fatal("the beat that ends the disconnect is not notable")
	}
	if s := tr.View()["h"]; !s.DisconnectedAt.IsZero() {
		t.Fatalf("a beat naming the new connection left the advisory standing (%v)", s.DisconnectedAt)
	}
}

// TestLastHeard: the arrival of a node's latest decoded heartbeat with
// the incarnation it named; an arrival only touched (not decoded, so of
// no known incarnation) does not count, and nothing counts while a
// disconnect stands.
func TestLastHeard(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	if _, _, ok := tr.LastHeard("h"); ok {
		t.Fatal("heard a node never heard")
	}
	a := Conn{Server: "NSERVER1", ID: 7}
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 1, AtMS: 1, Live: true, ConnServer: a.Server, ConnID: a.ID}, t0)
	tr.Touch("h", t0.Add(time.Second))
	if at, inc, ok := tr.LastHeard("h"); !ok || !at.Equal(t0) || inc != 1 {
		t.Fatalf("last heard %v incarnation %d %v, want the decoded beat at +0s of incarnation 1 (a touch names no incarnation)", at, inc, ok)
	}
	tr.Disconnected("h", a, t0.Add(2*time.Second))
	if at, _, ok := tr.LastHeard("h"); ok {
		t.Fatalf("heard at %v after its disconnect, with nothing since", at)
	}
	tr.Touch("h", t0.Add(3*time.Second))
	if at, _, ok := tr.LastHeard("h"); ok {
		t.Fatalf("heard at %v after its disconnect, with a message not yet decoded", at)
	}
	b := Conn{Server: "NSERVER1", ID: 8}
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 2, Beat: 1, AtMS: 2, Live: true, ConnServer: b.Server, ConnID: b.ID}, t0.Add(4*time.Second))
	if at, inc, ok := tr.LastHeard("h"); !ok || !at.Equal(t0.Add(4*time.Second)) || inc != 2 {
		t.Fatalf("last heard %v incarnation %d %v, want the new incarnation's beat at +4s", at, inc, ok)
	}
}

// TestBeatOfAnOlderIncarnationIsIgnored: a beat of a killed process
// delivered after its successor's first beat must not take the node back
// to the old incarnation (recovery would take the successor's life for
// the old process's, and keep a seal answer the old process gave). Only
// after the newer incarnation has been silent for heartbeat.OlderIncarnationWindow
// does a lower incarnation count, as a host whose clock stepped back.
func TestBeatOfAnOlderIncarnationIsIgnored(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 7, AtMS: 1_000, Live: true,
		Copies: []wire.CopyStatus{{Stream: "s", StreamID: 1, RecordTail: 9}}}, t0)
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 2, Beat: 1, AtMS: 2_000, Live: true, Copies: []wire.CopyStatus{}}, t0.Add(time.Second))
	if tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 8, AtMS: 1_500, Live: true,
		Copies: []wire.CopyStatus{{Stream: "s", StreamID: 1, RecordTail: 10}}}, t0.Add(1100*time.Millisecond)) {
		t.Error("a delayed beat of the old incarnation was notable")
	}
	if at, inc, ok := tr.LastHeard("h"); !ok || inc != 2 || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("last heard %v incarnation %d %v, want incarnation 2 at +1s", at, inc, ok)
	}
	if s := tr.View()["h"]; s.Incarnation != 2 || len(s.Copies) != 0 {
		t.Fatalf("incarnation %d with %d copies, want 2 with none (the old process's report is void)", s.Incarnation, len(s.Copies))
	}
	// A host restarted with its clock stepped back: its incarnation is
	// lower, and it counts once the higher one has been silent long enough.
	late := t0.Add(time.Second + heartbeat.OlderIncarnationWindow + time.Millisecond)
	if !tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 1, AtMS: 500, Live: true}, late) {
		t.Error("a lower incarnation after the window was not notable")
	}
	if at, inc, ok := tr.LastHeard("h"); !ok || inc != 1 || !at.Equal(late) {
		t.Fatalf("last heard %v incarnation %d %v, want incarnation 1 at %v (its clock is behind the last one's)", at, inc, ok, late)
	}
}

// TestOlderIncarnationWindowAfterAClockStep (review of session 30): the
// known incarnation counts as heard with every beat it sends, even while
// its clock has stepped back (each beat built "earlier" than the last).
// The window was measured from LastDecoded, which stops moving then, so 30
// s into such a step a late beat of the killed predecessor took the node
// back to the dead incarnation.
func TestOlderIncarnationWindowAfterAClockStep(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 2, Beat: 1, AtMS: 100_000, Live: true}, t0)
	// The host's clock steps back a minute and runs on from there.
	for i := 1; i <= 40; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		tr.Touch("h", at)
		tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 2, Beat: uint64(1 + i), AtMS: 40_000 + int64(i)*1_000, Live: true}, at)
	}
	end := t0.Add(40 * time.Second)
	if tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 1, Beat: 99, AtMS: 90_000, Live: true}, end.Add(10*time.Millisecond)) {
		t.Error("a late beat of the old incarnation was notable")
	}
	if at, inc, ok := tr.LastHeard("h"); !ok || inc != 2 {
		t.Fatalf("last heard %v incarnation %d %v; want incarnation 2, heard every second", at, inc, ok)
	}
}

// TestSupersededBeatsAreNoProofOfLife (review of the rule above): a
// successor whose clock stepped back beats with a lower incarnation; its
// messages are touched on arrival before decoding, and once decoded and
// ignored they must not keep the dead incarnation's LastSeen fresh, nor
// count as heard since its disconnect advisory: it expires on its TTL.
func TestSupersededBeatsAreNoProofOfLife(t *testing.T) {
	tr := New()
	t0 := time.Unix(1_000, 0)
	a := Conn{Server: "NSERVER1", ID: 7}
	tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 100, Beat: 1, AtMS: 1, Live: true, ConnServer: a.Server, ConnID: a.ID}, t0)
	tr.Disconnected("h", a, t0.Add(50*time.Millisecond))
	for i := 1; i <= 50; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		tr.Touch("h", at)
		tr.Heartbeat(wire.Heartbeat{Node: "h", Incarnation: 50, Beat: uint64(i), AtMS: int64(i), Live: true, ConnServer: "NSERVER1", ConnID: 8}, at)
	}
	s := tr.View()["h"]
	if s.Incarnation != 100 || !s.LastSeen.Equal(t0) {
		t.Fatalf("incarnation %d last seen %v after 5 s of a lower incarnation's beats; want 100 last seen at %v", s.Incarnation, s.LastSeen, t0)
	}
	if s.HeardSinceDisconnect() {
		t.Fatal("a lower incarnation's beats count as heard since the advisory")
	}
}

// TestFreshAndServing: a host is fresh when heard within the TTL on a
// connection no advisory closed, and serving when fresh and not leaving;
// the TTL's bound is exclusive.
func TestFreshAndServing(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	ttl := time.Second
	for _, c := range []struct {
		name           string
		seen           Seen
		now            time.Time
		fresh, serving bool
	}{
		{"heard just now", Seen{LastSeen: t0}, t0, true, true},
		{"heard within the TTL", Seen{LastSeen: t0}, t0.Add(ttl - time.Millisecond), true, true},
		{"silent a whole TTL", Seen{LastSeen: t0}, t0.Add(ttl), false, false},
		{"connection closed", Seen{LastSeen: t0, DisconnectedAt: t0}, t0, false, false},
		{"leaving", Seen{LastSeen: t0, Leaving: true}, t0, true, false},
	} {
		if got := c.seen.Fresh(c.now, ttl); got != c.fresh {
			t.Errorf("%s: Fresh = %v, want %v", c.name, got, c.fresh)
		}
		if got := c.seen.Serving(c.now, ttl); got != c.serving {
			t.Errorf("%s: Serving = %v, want %v", c.name, got, c.serving)
		}
	}
}
