// Package judge turns what the attention service knows — the coordinator's
// state (stream list and cluster info) and the heartbeats of the stream
// hosts — into the attention list: the things an operator must look at.
//
// Judge is a pure function of its arguments. The only facts that need time
// live in the Memory the caller passes in and keeps between calls: since when
// each entry has been listed, and how long each follower's tail has stood
// still. Nothing is durable: a restarted service starts with a new Memory and
// rebuilds the list from the coordinator and one round of heartbeats.
//
// The judge trusts only tails that copies publish in their heartbeats. A copy
// on a node that is live (or not yet heard since the service began
// listening) but that has published nothing for the stream is neither good
// nor bad evidence, so the judge stays quiet about it (seed, "The confirmed
// prefix").
package judge

import (
	"cmp"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// Config holds the judge's thresholds.
type Config struct {
	// TTL is how long a heartbeat keeps its node live. It is also how long
	// after ListeningSince the judge waits before calling a node that it
	// has not heard from down.
	TTL time.Duration
	// LagWindow is how long a follower's tail may stand still below its
	// owner's before the follower is listed as not catching up.
	LagWindow time.Duration
	// LateGrace is how long past the TTL a node whose beats stopped
	// arriving, and that the coordinators still count present (live or
	// draining), stays live for the judge with the copies of its latest
	// heartbeat: its beats are late, not missing. The coordinators'
	// leader does not expire such a host before it has probed it (up to
	// wire.DefaultProbeTimeout), and on a loaded machine every host's
	// beats arrive late at once: judged at the TTL alone, every copy
	// on a live host was listed as down and cleared again a second
	// later, for each stream, many times over a mass failover. An expiry
	// the coordinators decide, or a silence longer than TTL + LateGrace,
	// is down. Zero: no grace, the TTL alone.
	LateGrace time.Duration
}

// DefaultLateGrace is Config.LateGrace of brook-attention's --late-grace:
// the coordinators' leader probes a host whose TTL ran out for up to
// wire.DefaultProbeTimeout before it expires it, and attention learns of
// the expiry at its next pull (--refresh, a second).
const DefaultLateGrace = wire.DefaultProbeTimeout + time.Second

// View is the coordinator's state as the service last pulled it.
type View struct {
	Streams []wire.StreamInfo
	Nodes   []wire.NodeInfo
	// Version is the coordinator state version of Streams.
	Version uint64
	// ListeningSince is when the service last began hearing heartbeats
	// (start, or reconnect to NATS). Until a TTL has passed since then, a
	// node without a fresh heartbeat may simply not have been heard yet,
	// so it is unknown rather than down. Zero means "long ago".
	ListeningSince time.Time
}

// HeartbeatSeen is a node's latest heartbeat and when the service received
// it. Freshness is judged by the local receive time, never by the host's
// clock.
type HeartbeatSeen struct {
	Heartbeat wire.Heartbeat
	At        time.Time
}

// Wait kinds of wire.RecoveryWait.
const (
	WaitAnswers         = "answers"
	WaitConfirmedPrefix = "confirmed_prefix"
)

// severityRank orders severities, most urgent first.
var severityRank = map[string]int{
	wire.SeverityCritical: 0,
	wire.SeverityWarning:  1,
	wire.SeverityInfo:     2,
}

// found is an entry with the identity under which the Memory remembers since
// when it has been listed.
type found struct {
	entry wire.AttentionEntry
	key   string
}

// Judge returns the attention list for the given state at now, ordered by
// severity (critical first), then kind, stream and node. It records in mem
// since when each entry has been listed and forgets entries that are no
// longer listed, so an entry that goes away and comes back starts afresh. A
// nil mem judges without history: every entry is new and no follower has
// stood still long enough to be listed.
func Judge(cfg Config, v View, hbs map[string]HeartbeatSeen, mem *Memory, now time.Time) []wire.AttentionEntry {
	if mem == nil {
		mem = NewMemory()
	}
	j := newJudging(cfg, v, hbs, now)
	var all []found
	for _, s := range v.Streams {
		all = append(all, j.stream(s, mem)...)
	}
	all = append(all, j.nodesHoldingCopies()...)
	all = append(all, j.drainsStuck()...)
	all = append(all, j.storeFailures()...)
	mem.endRound()

	slices.SortFunc(all, func(a, b found) int {
		return cmp.Or(
			cmp.Compare(rank(a.entry.Severity), rank(b.entry.Severity)),
			cmp.Compare(a.entry.Kind, b.entry.Kind),
			cmp.Compare(a.entry.Stream, b.entry.Stream),
			cmp.Compare(a.entry.Node, b.entry.Node),
			cmp.Compare(a.key, b.key),
		)
	})
	out := make([]wire.AttentionEntry, 0, len(all))
	keys := make([]string, 0, len(all))
	for _, f := range all {
		keys = append(keys, f.key)
		out = append(out, f.entry)
	}
	since := mem.stamp(keys, now)
	for i := range out {
		out[i].SinceMS = since[i].UnixMilli()
	}
	return out
}

func rank(severity string) int {
	if r, ok := severityRank[severity]; ok {
		return r
	}
	return len(severityRank)
}
