package heartbeat

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// worstCopies returns n copies as large as the wire allows: the longest
// names and the largest numbers.
func worstCopies(n int) []wire.CopyStatus {
	out := make([]wire.CopyStatus, n)
	for i := range out {
		name := fmt.Sprintf("%d-%s", i, strings.Repeat("s", wire.MaxNameLen))[:wire.MaxNameLen]
		out[i] = wire.CopyStatus{Stream: name, StreamID: math.MaxUint64, Role: wire.RoleFollower,
			Epoch: math.MaxUint64, RecordTail: math.MaxUint64, CursorTail: math.MaxUint64,
			Confirmed: math.MaxUint64, Sealed: true}
	}
	return out
}

func TestSplitKeepsEveryPartUnderTheLimit(t *testing.T) {
	hb := wire.Heartbeat{Node: strings.Repeat("n", wire.MaxNameLen), Incarnation: math.MaxUint64,
		Leaving: true, AtMS: math.MaxInt64, Beat: math.MaxUint64, Copies: worstCopies(5000),
		// Longer than the wire allows, of bytes JSON escapes: Split cuts it.
		StoreError: strings.Repeat("\x01<", wire.MaxStoreErrorLen)}
	for _, limit := range []int{1 << 20, 64 << 10, 4 << 10} {
		parts := Split(hb, limit)
		if len(parts) == 0 {
			t.Fatalf("limit %d: no parts", limit)
		}
		var got []wire.CopyStatus
		for i, p := range parts {
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > limit {
				t.Fatalf("limit %d: part %d is %d bytes", limit, i, len(data))
			}
			if p.Part != i || p.Parts != len(parts) || p.Beat != hb.Beat || p.Node != hb.Node || !p.Leaving ||
				p.StoreError != hb.StoreError[:wire.MaxStoreErrorLen] {
				t.Fatalf("limit %d: part %d header %+v", limit, i, p)
			}
			got = append(got, p.Copies...)
		}
		if !slices.Equal(got, hb.Copies) {
			t.Fatalf("limit %d: the parts do not hold the copies in order", limit)
		}
	}
	// The default payload limit takes a host of 5,000 copies in 2 parts;
	// one message would be 1.4 MiB.
	if n := len(Split(hb, 1<<20)); n != 2 {
		t.Fatalf("5,000 copies in %d parts at 1 MiB, want 2", n)
	}
}

func TestSplitWholeAndImpossible(t *testing.T) {
	hb := wire.Heartbeat{Node: "a", Incarnation: 1, Beat: 3, Copies: worstCopies(3)}
	parts := Split(hb, 1<<20)
	if len(parts) != 1 || parts[0].Parts != 1 || len(parts[0].Copies) != 3 {
		t.Fatalf("small heartbeat split into %+v", parts)
	}
	if parts := Split(wire.Heartbeat{Node: "a", Copies: []wire.CopyStatus{}}, 1<<20); len(parts) != 1 || parts[0].Copies == nil {
		t.Fatalf("empty heartbeat: %+v", parts)
	}
	if parts := Split(hb, maxHeaderBytes+maxCopyBytes-1); parts != nil {
		t.Fatalf("a limit below one copy gave %d parts", len(parts))
	}
	if parts := Split(wire.Heartbeat{Copies: worstCopies(MaxParts + 1)}, maxHeaderBytes+maxCopyBytes); parts != nil {
		t.Fatalf("more than MaxParts parts: %d", len(parts))
	}
}

func TestAssemblerPutsShuffledPartsBackTogether(t *testing.T) {
	a := NewAssembler()
	hb := wire.Heartbeat{Node: "h", Incarnation: 9, Beat: 4, AtMS: 77, Copies: worstCopies(50)}
	parts := Split(hb, maxHeaderBytes+7*maxCopyBytes) // 8 parts of at most 7
	if len(parts) != 8 {
		t.Fatalf("%d parts", len(parts))
	}
	rand.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	for i, p := range parts {
		whole, ok := a.Add(p)
		if ok != (i == len(parts)-1) {
			t.Fatalf("part %d of %d: complete=%v", i, len(parts), ok)
		}
		if ok {
			if !slices.Equal(whole.Copies, hb.Copies) || whole.Parts != 1 || whole.Part != 0 || whole.AtMS != 77 {
				t.Fatalf("assembled %d copies, parts %d", len(whole.Copies), whole.Parts)
			}
		}
	}
	if len(a.pending) != 0 {
		t.Fatalf("%d beats still pending", len(a.pending))
	}
}

func TestAssemblerDropsOldAndBadParts(t *testing.T) {
	a := NewAssembler()
	beat := func(inc, n uint64) []wire.Heartbeat {
		return Split(wire.Heartbeat{Node: "h", Incarnation: inc, Beat: n, Copies: worstCopies(4)}, maxHeaderBytes+2*maxCopyBytes)
	}
	b1, b2 := beat(1, 1), beat(1, 2)
	if _, ok := a.Add(b1[0]); ok {
		t.Fatal("half a beat completed")
	}
	// A newer beat replaces the unfinished one; the old beat's last part
	// then completes nothing.
	if _, ok := a.Add(b2[0]); ok {
		t.Fatal("half a beat completed")
	}
	if _, ok := a.Add(b1[1]); ok {
		t.Fatal("a late part of an older beat completed it")
	}
	if _, ok := a.Add(b2[0]); ok {
		t.Fatal("a repeated part completed the beat")
	}
	bad := b2[1]
	bad.Part = 5
	if _, ok := a.Add(bad); ok {
		t.Fatal("a part past the part count was taken")
	}
	if whole, ok := a.Add(b2[1]); !ok || len(whole.Copies) != 4 {
		t.Fatalf("beat 2 not completed: %v %d", ok, len(whole.Copies))
	}
	// A new incarnation starts over, even with a lower beat number.
	r := beat(2, 1)
	a.Add(r[0])
	if whole, ok := a.Add(r[1]); !ok || whole.Incarnation != 2 {
		t.Fatal("a restarted host's beat was not assembled")
	}
	// A whole heartbeat (an older host that does not split) passes as is
	// and drops any unfinished beat.
	a.Add(beat(2, 2)[0])
	if whole, ok := a.Add(wire.Heartbeat{Node: "h", Incarnation: 2, Copies: worstCopies(1)}); !ok || whole.Parts != 1 {
		t.Fatal("a whole heartbeat was not passed through")
	}
	if len(a.pending) != 0 {
		t.Fatalf("%d beats pending after a whole one", len(a.pending))
	}
	if _, ok := a.Add(wire.Heartbeat{Node: "h", Parts: MaxParts + 1}); ok {
		t.Fatal("a beat of too many parts was taken")
	}
}

// A liveness beat is proof of life only: never a whole beat (its empty
// copies are not a report), and it leaves a beat being assembled alone.
func TestAssemblerIgnoresLivenessBeats(t *testing.T) {
	a := NewAssembler()
	cs := []wire.CopyStatus{{Stream: "a"}, {Stream: "b"}}
	if _, ok := a.Add(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 1, Part: 0, Parts: 2, Copies: cs[:1]}); ok {
		t.Fatal("first of two parts whole")
	}
	if _, ok := a.Add(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 2, Live: true, Copies: []wire.CopyStatus{}}); ok {
		t.Fatal("a liveness beat was taken for a whole beat")
	}
	whole, ok := a.Add(wire.Heartbeat{Node: "h1", Incarnation: 1, Beat: 1, Part: 1, Parts: 2, Copies: cs[1:]})
	if !ok || len(whole.Copies) != 2 {
		t.Fatalf("beat 1 after a liveness beat: ok %v, copies %v", ok, whole.Copies)
	}
}

// TestSuperseded: only a lower incarnation within the window is ignored.
func TestSuperseded(t *testing.T) {
	for _, c := range []struct {
		inc, current uint64
		silent       time.Duration
		want         bool
	}{
		{1, 2, 0, true},
		{1, 2, OlderIncarnationWindow - time.Millisecond, true},
		{1, 2, OlderIncarnationWindow, false},
		{2, 2, 0, false},
		{3, 2, 0, false},
		{1, 0, 0, false},
	} {
		if got := Superseded(c.inc, c.current, c.silent); got != c.want {
			t.Errorf("Superseded(%d, %d, %v) = %v, want %v", c.inc, c.current, c.silent, got, c.want)
		}
	}
}
