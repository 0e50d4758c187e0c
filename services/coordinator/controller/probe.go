package controller

import "time"

// ProbeOutcome is how a liveness probe of a host whose TTL ran out ended:
// before the leader proposes a TTL expiry it asks the host, on the host's
// own probe subject (wire.HostProbeSubject), whether it is alive. A
// silence past the TTL is either a dead host or a live one that was not
// scheduled, or whose beats were delayed, for a while (a loaded machine);
// a dead host has no subscriptions left, a live one still answers.
type ProbeOutcome int

const (
	// ProbeNoResponders: nobody subscribes to the host's probe subject,
	// so the host's process or its connection is gone.
	ProbeNoResponders ProbeOutcome = iota
	// ProbeAnswered: the host answered, naming an incarnation.
	ProbeAnswered
	// ProbeTimedOut: the request was delivered to a subscription but no
	// answer came within the probe's bound (a host cut off without its
	// connection closing, or one stalled longer than the bound).
	ProbeTimedOut
	// ProbeAborted: the probe could not be carried out or judged (this
	// replica stopped leading, or its own connection failed): nothing is
	// concluded, the next round judges again.
	ProbeAborted
)

// String names the outcome for logs and metrics.
func (o ProbeOutcome) String() string {
	switch o {
	case ProbeNoResponders:
		return "no_responders"
	case ProbeAnswered:
		return "answered"
	case ProbeTimedOut:
		return "timeout"
	default:
		return "aborted"
	}
}

// ExpireAfterProbe reports whether a TTL expiry of incarnation is to be
// proposed after its probe ended with outcome, the answer (if any) naming
// answered. No responders and no answer within the bound expire; an
// answer from the same incarnation withdraws the expiry (the host is
// alive, the next round judges it again); an answer from another
// incarnation says a new process of the host runs, so the one the state
// registered is gone. An aborted probe decides nothing (no expiry now).
func ExpireAfterProbe(outcome ProbeOutcome, incarnation, answered uint64) bool {
	switch outcome {
	case ProbeNoResponders, ProbeTimedOut:
		return true
	case ProbeAnswered:
		return answered != incarnation
	default:
		return false
	}
}

// ProbeWaitFloor is the least time the leader waits for a host's answer to
// a liveness probe: a NATS round trip and a host scheduled at once take a
// few milliseconds; the floor is what a quiet machine adds to the TTL when
// a host is cut off without its connection closing (a blackhole): at TTL
// 800 ms that failover is to cost under 1.5 s of writes (issue 14).
const ProbeWaitFloor = 100 * time.Millisecond

// probeWaitFactor scales the recent lateness into the probe's wait.
const probeWaitFactor = 2

// ProbeWait is how long the leader waits for the answer to a liveness
// probe, given late, the largest lateness of any beat (or stall of the
// leader) noted lately (liveness.Tracker.RecentLateness), and bound
// (--probe-timeout): twice the lateness, at least ProbeWaitFloor and at
// most bound (a bound under the floor wins). On a quiet machine a host that does not answer is expired
// a floor after its TTL; on a loaded one, where hosts went unscheduled for
// as long as late, a stalled host gets up to the full bound to answer.
func ProbeWait(late, bound time.Duration) time.Duration {
	return min(max(ProbeWaitFloor, probeWaitFactor*late), bound)
}

// AdvisoryGrace is how long after a host's disconnect advisory the leader
// waits to hear the host on a new connection before it expires it, given
// grace (--disconnect-grace), late and bound as for ProbeWait: the grace,
// or twice the recent lateness when that is longer, at most bound (never
// under grace). On a quiet machine a killed host is expired a grace after
// its connection closed; on a loaded one a host's reconnect is as late as
// its beats (a kicked host took 137 ms to reconnect against the 100 ms
// grace while make test loaded the machine), and the grace stretches with
// them.
func AdvisoryGrace(grace, late, bound time.Duration) time.Duration {
	return max(grace, min(probeWaitFactor*late, bound))
}
