package client

import (
	"sync"
	"time"
)

// When is a wait "unusually long"? The owner watch probes an attempt once
// it has waited the probe delay. A fixed delay (WithOwnerProbe, 250 ms by
// default) is right while owners confirm in milliseconds; but when every
// owner is slow at once, as when thousands of idle streams are published to
// together, each attempt past it sends a probe to an owner that is only
// busy, and the probes (a fetch each, with its reply and its host's read)
// add to the load that made the owners slow (issue 17: a burst of one
// publish to each of 3,000 idle streams, with no host lost, sent 3,966
// probes and confirmed its last after 1.2 s, p50 0.8 s; with probes off,
// 0.7 s and 0.5 s; a burst to 10,000 streams sent 2.3 probes a stream).
//
// So the delay also follows what the client sees: confirmRTT estimates the
// time from an attempt's send to its confirm the way TCP estimates a
// round trip for its retransmission timeout (RFC 6298: a smoothed mean
// and mean deviation, each sample weighing 1/8 and 1/4), and the probe
// delay is the larger of the configured one and the mean plus four
// deviations: an attempt is probed once it waited longer than the
// client's confirms now take. Under a burst the confirms' latency grows
// with the queue, and so does the delay, ahead of it by the deviation;
// when an owner dies, the client's other streams keep confirming fast and
// the delay stays at the configured one (unless some of them are slow
// too; see below). An estimate is used only while
// confirms keep coming: once none arrived for as long as it says, the
// configured delay applies again, so a client whose only stream lost its
// owner (no confirms at all) is not held by the pace of a burst long
// past, and the next confirm starts a new estimate rather than bringing
// the old one back. The estimate never raises the delay past the request
// timeout, where the attempt is retried anyway.
//
// The estimate is the client's, not a stream's: one stream confirming
// slowly (a slow follower) raises the delay of the client's other streams
// too, so a dead owner of a fast stream is found up to the slow stream's
// round trip later (a new owner's notice still kicks a probe at once).
// Per-stream estimates would need samples per stream, which a burst of one
// publish per stream, the case this is for, does not give.

// confirmRTT is the client's estimate of its confirms' round trip.
type confirmRTT struct {
	mu     sync.Mutex
	srtt   time.Duration // smoothed round trip; 0 before the first sample
	rttvar time.Duration // its mean deviation
	last   time.Time     // when the last sample was taken
}

// observe adds the round trip d of a confirmed attempt, taken at now.
func (r *confirmRTT) observe(d time.Duration, now time.Time) {
	if d < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, applies := r.current(now)
	r.last = now
	if !applies {
		// The first sample, or the first after a silence longer than
		// the estimate, which therefore no longer applied: start over
		// from this one, as TCP does after an idle spell (a burst's
		// estimate must not come back whole with one fast confirm
		// minutes later).
		r.srtt, r.rttvar = max(d, time.Microsecond), d/2
		return
	}
	dev := r.srtt - d
	if dev < 0 {
		dev = -dev
	}
	r.rttvar += (dev - r.rttvar) / 4
	r.srtt += (d - r.srtt) / 8
}

// probeDelay is how long an attempt waits before its first probe at now:
// floor, or the estimate (mean plus four deviations, at most ceiling)
// when that is longer and a confirm arrived within it.
func (r *confirmRTT) probeDelay(floor, ceiling time.Duration, now time.Time) time.Duration {
	r.mu.Lock()
	rto, applies := r.current(now)
	r.mu.Unlock()
	if !applies || rto <= floor {
		return floor
	}
	return min(rto, max(ceiling, floor))
}

// current is the estimate at now (mean plus four deviations) and whether
// it applies: a sample was taken, and the last one within the estimate.
// Under r.mu.
func (r *confirmRTT) current(now time.Time) (rto time.Duration, applies bool) {
	rto = r.srtt + 4*r.rttvar
	return rto, r.srtt != 0 && now.Sub(r.last) <= rto
}
