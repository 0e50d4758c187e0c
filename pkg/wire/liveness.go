package wire

import "time"

// The failure detector's defaults, defined once for every service: the
// hosts' beats (streamhost --heartbeat-interval, --liveness-interval), the
// coordinators' judgement (coordinator --ttl, --disconnect-grace) and
// attention's (attention --ttl). docs/failover.md ("The failure detector")
// explains the choice of each.
const (
	// DefaultHeartbeatInterval is how often a host publishes its
	// heartbeat: the copies whose fields changed since its previous
	// report (a delta), or every copy (a full report).
	DefaultHeartbeatInterval = 500 * time.Millisecond
	// DefaultFullReportInterval is how often a host's heartbeat is a full
	// report (every copy's tails) instead of a delta: the longest a
	// reader that missed a delta, or started, waits to know the host's
	// copies again. At 5 s an e2e accept-loss 1.8 s after the cluster
	// started found the live copy's tails unpublished on the coordinator
	// (it had started after the host's first full report) and committed
	// without a history start. So a coordinator that gets a delta it has
	// no base for asks the host for a full report (AssignNotice.FullReport,
	// honoured at most every MinAskedFullReportGap), and the periodic one
	// is a safety net: every 1 s, the full reports of 10,000 streams'
	// copies were most of the bytes NATS carried, and heartbeats queued
	// behind them past the TTL (issue 17).
	DefaultFullReportInterval = 5 * time.Second
	// MinAskedFullReportGap is the least time between two full reports a
	// host sends because a reader asked: however many readers ask, it
	// costs the host at most one full report per gap.
	MinAskedFullReportGap = 500 * time.Millisecond
	// DefaultLivenessInterval is how often a host publishes a liveness
	// beat (no copies) between heartbeats.
	DefaultLivenessInterval = 100 * time.Millisecond
	// DefaultHostTTL is how long a host may go unheard before the leader
	// probes it (and expires it if it does not answer): eight liveness
	// beats.
	DefaultHostTTL = 800 * time.Millisecond
	// DefaultDisconnectGrace is how long, after a disconnect advisory
	// about a host's connection, a coordinator waits for a beat on a
	// new connection before it expires the host. A live host whose
	// connection the server closed reconnects and beats within 20-50 ms
	// on a busy 2-core machine (e2e TestHostConnectionKicked fails at
	// 20 ms and passes at 50 ms); 100 ms keeps twice that margin.
	DefaultDisconnectGrace = 100 * time.Millisecond
	// DefaultProbeTimeout is the longest the coordinator leader waits for
	// a host's answer to the liveness probe it sends when the host's TTL
	// ran out, before it expires the host anyway (the wait adapts to how
	// late beats arrive lately, from a small floor on a quiet machine up
	// to this; coordinator controller.ProbeWait): a host with no
	// subscription left (a dead process) is expired at once on "no
	// responders", one that answers is not expired. On a 2-core machine
	// at load 30-60 whole host processes went unscheduled for 0.3-1.0 s,
	// silent for 0.8-1.4 s in all (issue 17); a second rides that out,
	// and bounds what a host cut off without its connection closing
	// costs on a loaded machine: TTL plus this.
	DefaultProbeTimeout = time.Second
)
