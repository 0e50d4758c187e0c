package liveness

import (
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Lateness: how late beats arrive now, which tells the leader how long a
// host whose TTL ran out may take to answer its liveness probe (see
// controller.ProbeWait). A beat's lateness is how much later than due it
// arrived, in two parts, each measured on one clock only so that the
// difference between the host's and this coordinator's clocks cancels:
//
//   - its excess transit: arrival (this clock) minus the host's send time
//     (wire.Heartbeat.AtMS, the host's clock), minus the smallest such
//     transit from that host over the last minTransitWindow; the skew is
//     in both terms. It grows when NATS or this coordinator falls behind.
//   - the host's own gap: the time between two of its liveness beats
//     (both stamped by the host's clock) past wire.DefaultLivenessInterval.
//     It grows when the host was not scheduled.
//
// The coordinator's own stalls (server stallWatch) count as lateness too.
// The largest lateness noted over the last lateWindow is RecentLateness:
// old spikes age out.

const (
	// lateBuckets is how many buckets a windowed extreme keeps; a window
	// covers between lateBuckets-1 and lateBuckets bucket widths.
	lateBuckets = 4
	// minTransitWidth is the bucket width of a host's smallest transit
	// (a window of 90-120 s): long enough to hold quiet moments, short
	// enough that a host clock stepped back is forgotten.
	minTransitWidth = 30 * time.Second
	// lateWidth is the bucket width of the recent lateness (15-20 s).
	lateWidth = 5 * time.Second
	// maxLiveGap: a longer gap between two liveness beats is not a stall
	// of a host that beats (one cut off and healed, or one that sends
	// liveness beats only when it reconnects) and is not noted.
	maxLiveGap = 5 * time.Second
)

// extreme is the smallest (or largest) value noted over a sliding window
// of lateBuckets buckets of width: bounded memory, exact to a bucket.
type extreme struct {
	width time.Duration
	least bool
	slot  [lateBuckets]int64
	val   [lateBuckets]int64
	ok    [lateBuckets]bool
}

func (e *extreme) bucket(at time.Time) int64 { return at.UnixNano() / int64(e.width) }

// add notes v at at.
func (e *extreme) add(at time.Time, v int64) {
	b := e.bucket(at)
	i := int(((b % lateBuckets) + lateBuckets) % lateBuckets)
	if !e.ok[i] || e.slot[i] != b {
		e.slot[i], e.val[i], e.ok[i] = b, v, true
		return
	}
	if (e.least && v < e.val[i]) || (!e.least && v > e.val[i]) {
		e.val[i] = v
	}
}

// get returns the extreme of the values noted in the window ending at now,
// and whether there was any.
func (e *extreme) get(now time.Time) (int64, bool) {
	b := e.bucket(now)
	var out int64
	found := false
	for i := range lateBuckets {
		if !e.ok[i] || e.slot[i] > b || e.slot[i] <= b-lateBuckets {
			continue
		}
		if v := e.val[i]; !found || (e.least && v < out) || (!e.least && v > out) {
			out, found = v, true
		}
	}
	return out, found
}

// lateness is one host's part: its smallest transit, and its latest
// liveness beat's send time.
type lateness struct {
	transit     extreme // ms, least
	incarnation uint64
	liveAtMS    int64
}

// noteLate notes hb, arrived at at, into the recent lateness. Call with
// t.mu held.
func (t *Tracker) noteLate(hb wire.Heartbeat, at time.Time) {
	if hb.AtMS <= 0 {
		return
	}
	l := t.late[hb.Node]
	if l == nil {
		l = &lateness{transit: extreme{width: minTransitWidth, least: true}}
		t.late[hb.Node] = l
	}
	if l.incarnation != hb.Incarnation {
		// A new process: its clock may be another machine's.
		*l = lateness{transit: extreme{width: minTransitWidth, least: true}, incarnation: hb.Incarnation}
	}
	transit := at.UnixMilli() - hb.AtMS
	l.transit.add(at, transit)
	least, _ := l.transit.get(at)
	late := transit - least
	if hb.Live {
		if l.liveAtMS > 0 && hb.AtMS > l.liveAtMS && hb.AtMS-l.liveAtMS <= maxLiveGap.Milliseconds() {
			late += max(0, hb.AtMS-l.liveAtMS-wire.DefaultLivenessInterval.Milliseconds())
		}
		l.liveAtMS = max(l.liveAtMS, hb.AtMS)
	}
	if late > 0 {
		t.recent.add(at, late)
	}
}

// Stalled notes that this coordinator ran nothing for d, up to at: beats
// that arrived meanwhile were read as late as that.
func (t *Tracker) Stalled(d time.Duration, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recent.add(at, d.Milliseconds())
}

// RecentLateness is the largest lateness of a beat from any host (or stall
// of this coordinator) noted in the last 15-20 s before now: zero on a
// quiet machine.
func (t *Tracker) RecentLateness(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms, _ := t.recent.get(now)
	return time.Duration(ms) * time.Millisecond
}
