package liveness

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// beats feeds tr n liveness beats of node, one every interval from start on
// the host's clock (skew ahead of this coordinator's), each arriving
// transit after it was sent; it returns the time after the last.
func beats(tr *Tracker, node string, start time.Time, skew, transit time.Duration, n int) time.Time {
	at := start
	for range n {
		sent := at.Add(skew)
		tr.Heartbeat(wire.Heartbeat{Node: node, Incarnation: 1, Live: true, AtMS: sent.UnixMilli()}, at.Add(transit))
		at = at.Add(wire.DefaultLivenessInterval)
	}
	return at
}

// The recent lateness of beats: none on a quiet machine, whatever the
// hosts' clocks say; beats that arrive late (slow transit, or a host that
// was not scheduled and beat late) and the coordinator's own stalls raise
// it; old ones age out.
func TestRecentLateness(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	quiet := func() (*Tracker, time.Time) {
		tr := New()
		// h1's clock is 3 s behind, h2's 7 s ahead; 2 ms on the wire.
		now := beats(tr, "h1", t0, -3*time.Second, 2*time.Millisecond, 50)
		beats(tr, "h2", t0, 7*time.Second, 2*time.Millisecond, 50)
		return tr, now
	}
	t.Run("quiet, skewed clocks", func(t *testing.T) {
		tr, now := quiet()
		if l := tr.RecentLateness(now); l != 0 {
			t.Fatalf("lateness %v on a quiet machine with skewed clocks", l)
		}
	})
	t.Run("slow transit", func(t *testing.T) {
		tr, now := quiet()
		now = beats(tr, "h2", now, 7*time.Second, 302*time.Millisecond, 1)
		if l := tr.RecentLateness(now); l != 300*time.Millisecond {
			t.Fatalf("lateness %v after a beat 300 ms late on the wire, want 300ms", l)
		}
	})
	t.Run("host not scheduled", func(t *testing.T) {
		tr, now := quiet()
		// h1 beats 600 ms after its previous beat was due.
		now = beats(tr, "h1", now.Add(600*time.Millisecond), -3*time.Second, 2*time.Millisecond, 1)
		if l := tr.RecentLateness(now); l != 600*time.Millisecond {
			t.Fatalf("lateness %v after a host beat 600 ms late, want 600ms", l)
		}
	})
	t.Run("coordinator stalled", func(t *testing.T) {
		tr, now := quiet()
		tr.Stalled(450*time.Millisecond, now)
		if l := tr.RecentLateness(now); l != 450*time.Millisecond {
			t.Fatalf("lateness %v after a 450 ms stall, want 450ms", l)
		}
	})
	t.Run("old spikes age out", func(t *testing.T) {
		tr, now := quiet()
		now = beats(tr, "h2", now, 7*time.Second, 502*time.Millisecond, 1)
		// Quiet beats for 25 s: the spike is forgotten, and the quiet
		// beats are measured against a transit least kept from before.
		now = beats(tr, "h1", now, -3*time.Second, 2*time.Millisecond, 250)
		if l := tr.RecentLateness(now); l != 0 {
			t.Fatalf("lateness %v 25 s after a spike", l)
		}
	})
	t.Run("new incarnation, new clock", func(t *testing.T) {
		tr, now := quiet()
		// h1 restarts on a machine whose clock is 5 s further behind:
		// its transits all look 5 s longer, none is late.
		at := now
		for range 20 {
			tr.Heartbeat(wire.Heartbeat{Node: "h1", Incarnation: 2, Live: true, AtMS: at.Add(-8 * time.Second).UnixMilli()}, at.Add(2*time.Millisecond))
			at = at.Add(wire.DefaultLivenessInterval)
		}
		if l := tr.RecentLateness(at); l != 0 {
			t.Fatalf("lateness %v after a restart on another clock", l)
		}
	})
}

// A windowed least forgets values older than its window.
func TestExtremeWindow(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	e := extreme{width: time.Second, least: true}
	e.add(t0, 5)
	e.add(t0.Add(1500*time.Millisecond), 9)
	if v, ok := e.get(t0.Add(2 * time.Second)); !ok || v != 5 {
		t.Fatalf("least %d %v, want 5", v, ok)
	}
	if v, ok := e.get(t0.Add(lateBuckets * time.Second)); !ok || v != 9 {
		t.Fatalf("least %d %v after the first aged out, want 9", v, ok)
	}
	if _, ok := e.get(t0.Add(10 * time.Second)); ok {
		t.Fatal("values 10 s old in a 4 s window")
	}
}
