package heartbeat

import "time"

// OlderIncarnationWindow is how long a node's current incarnation must
// have been silent before a heartbeat naming a lower incarnation counts
// (Superseded).
const OlderIncarnationWindow = 30 * time.Second

// Superseded reports whether a heartbeat naming incarnation inc is to be
// ignored by a reader that knows the node as incarnation current, last
// heard silentFor ago. Incarnations grow (a host takes its start time in
// nanoseconds), so a lower one is normally a beat a killed process built
// and the bus delivered after its successor's: it says nothing of the node
// now and must not take it back to the old incarnation (a coordinator's
// recovery would take the successor's life for its predecessor's). The
// window is far longer than any transit, and lets a host whose clock
// stepped back across a restart be heard once its predecessor is surely
// gone. The coordinators and attention both follow this one rule.
func Superseded(inc, current uint64, silentFor time.Duration) bool {
	return inc < current && silentFor < OlderIncarnationWindow
}
