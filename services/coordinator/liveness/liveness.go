// Package liveness keeps what one coordinator has heard from the stream
// hosts: the time of each host's latest heartbeat, its incarnation, whether
// it announced it is leaving, the tails it published per copy, and
// disconnect advisories from the NATS system account; and how late beats
// arrived lately (lateness.go), which sets how long the leader waits for a
// liveness probe's answer. All of it is under Tracker's one mutex, held
// for no I/O.
//
// Heartbeats are not written to Raft: every coordinator keeps its own view
// in memory, and only the leader's controller acts on it. A new leader
// therefore starts with little history, which is why the controller waits
// one TTL after gaining leadership before expiring anyone.
package liveness

import (
	"iter"
	"maps"
	"sync"
	"time"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
)

// Seen is one host as this coordinator last heard it.
type Seen struct {
	Node        string
	Incarnation uint64
	// LastSeen is when the latest heartbeat arrived (this coordinator's clock).
	LastSeen time.Time
	// accepted is LastSeen as of the latest heartbeat that was not
	// superseded: a superseded beat takes back the arrival Touch noted
	// for it.
	accepted time.Time
	// LastAtMS is when the latest decoded heartbeat says it was built
	// (the host's clock, wire.Heartbeat.AtMS) and LastDecoded when that
	// heartbeat arrived, for logs: the gap between them is its transit,
	// the one from LastDecoded to LastSeen the decoding's backlog.
	LastAtMS    int64
	LastDecoded time.Time
	Leaving     bool
	// DisconnectedAt is when an advisory said the host's NATS connection
	// closed, if no heartbeat has arrived since that names another
	// connection (or none); zero otherwise. DisconnectedConn is the
	// connection the advisory named (zero when it named none).
	DisconnectedAt   time.Time
	DisconnectedConn Conn
	// StaleUntil is the arrival of the latest heartbeat decoded after the
	// advisory that named the connection the advisory closed: arrivals up
	// to then are explained, and prove nothing of the host now.
	StaleUntil time.Time
	// Conn is the NATS connection the newest heartbeat that named one
	// was sent on (zero when none did), and ConnBeat that heartbeat's beat
	// number: a beat delayed on an old connection and processed after a
	// newer one does not take Conn back.
	Conn     Conn
	ConnBeat uint64
	// Copies are the host's copies as its reports say, by stream name:
	// the last full report with the deltas since applied (see package
	// heartbeat). After a missed delta they stay as they were until the
	// next full report.
	Copies map[string]wire.CopyStatus
}

// Fresh reports whether the host was heard within ttl of now on a
// connection that no disconnect advisory has closed since: the one rule of
// a host's silence being short enough, which the controller (node
// registration, Reachable) and accept-loss's live copies share.
func (s Seen) Fresh(now time.Time, ttl time.Duration) bool {
	return s.DisconnectedAt.IsZero() && now.Sub(s.LastSeen) < ttl
}

// Serving reports whether the host is Fresh and has not said it is
// leaving.
func (s Seen) Serving(now time.Time, ttl time.Duration) bool {
	return !s.Leaving && s.Fresh(now, ttl)
}

// HeardSinceDisconnect reports whether a heartbeat message arrived after
// the disconnect advisory that is not known to be stale: one that reconnects
// the host once decoded, or one not decoded yet (Touch notes arrivals
// before their decoding, which may lag).
func (s Seen) HeardSinceDisconnect() bool {
	return s.LastSeen.After(s.DisconnectedAt) && s.LastSeen.After(s.StaleUntil)
}

// Conn names a NATS connection: the server's id and the client id that
// server gave it (client ids are per server).
type Conn struct {
	Server string
	ID     uint64
}

// Known reports whether c names a connection.
func (c Conn) Known() bool { return c.Server != "" && c.ID != 0 }

// Tracker is safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	nodes map[string]*Seen
	parts *heartbeat.Assembler
	// reports rebuild each node's copies from its reports; Seen.Copies
	// is the map of the node's entry.
	reports map[string]*heartbeat.Copies
	// late is each host's part of the lateness, recent the largest
	// lateness noted lately (lateness.go).
	late   map[string]*lateness
	recent extreme
}

// New returns an empty tracker.
func New() *Tracker {
	return &Tracker{nodes: map[string]*Seen{}, parts: heartbeat.NewAssembler(), reports: map[string]*heartbeat.Copies{},
		late: map[string]*lateness{}, recent: extreme{width: lateWidth}}
}

// Heartbeat records hb, received at at; hb may be one part of a beat split
// into several messages (see package heartbeat): every part is proof of
// life, and the copies change once all parts of a report are in (a full
// report replaces them, a delta that follows the last report applied
// updates them). It reports whether the heartbeat
// says something the controller should act on soon: a node or incarnation
// not heard before, a change of the leaving flag, or the end of a pending
// disconnect.
func (t *Tracker) Heartbeat(hb wire.Heartbeat, at time.Time) (notable bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.nodes[hb.Node]
	if s == nil {
		s = &Seen{Node: hb.Node}
		t.nodes[hb.Node] = s
		notable = true
	}
	// The known incarnation was last heard with its latest accepted beat
	// (accepted), not LastDecoded, which stops moving while the host's
	// clock has stepped back (TestOlderIncarnationWindowAfterAClockStep).
	if heartbeat.Superseded(hb.Incarnation, s.Incarnation, at.Sub(s.accepted)) {
		// A beat of another process than the one known (its killed
		// predecessor's, delivered late, or a successor's with a clock
		// stepped back): no proof that the known one lives. Touch noted
		// its arrival before decoding; take that back, or a dead
		// incarnation whose successor beats would never expire (nor its
		// disconnect advisory count).
		s.LastSeen = s.accepted
		return false
	}
	hbConn := Conn{Server: hb.ConnServer, ID: hb.ConnID}
	// A heartbeat after the advisory means the host reconnected, unless
	// it names the very connection the advisory closed: with beats on a
	// connection of their own, that is a beat built before the close and
	// delivered after the advisory, which says nothing of the host now.
	stale := hbConn.Known() && hbConn == s.DisconnectedConn
	reconnected := !s.DisconnectedAt.IsZero() && !at.Before(s.DisconnectedAt) && !stale
	if s.Incarnation != hb.Incarnation || s.Leaving != hb.Leaving || reconnected {
		notable = true
	}
	if s.Incarnation != hb.Incarnation {
		// A new process: what the old one reported says nothing of what
		// this one holds (it may have started on an empty disk).
		s.Copies = nil
		s.Conn, s.ConnBeat = Conn{}, 0
		s.LastAtMS = 0 // its clock may be behind its predecessor's
		t.report(hb.Node).Reset(hb.Incarnation)
	}
	s.Incarnation = hb.Incarnation
	s.Leaving = hb.Leaving
	if hbConn.Known() && hb.Beat >= s.ConnBeat {
		s.Conn, s.ConnBeat = hbConn, hb.Beat
	}
	if at.After(s.LastSeen) {
		s.LastSeen = at
	}
	s.accepted = s.LastSeen
	if hb.AtMS >= s.LastAtMS {
		s.LastAtMS, s.LastDecoded = hb.AtMS, at
	}
	t.noteLate(hb, at)
	switch {
	case reconnected:
		s.DisconnectedAt, s.DisconnectedConn, s.StaleUntil = time.Time{}, Conn{}, time.Time{}
	case !s.DisconnectedAt.IsZero() && at.After(s.StaleUntil):
		s.StaleUntil = at
	}
	whole, ok := t.parts.Add(hb)
	if !ok {
		return notable
	}
	if r := t.report(hb.Node); r.Apply(whole) {
		s.Copies = r.Map()
	}
	return notable
}

// Touch records that a message of a known node's heartbeats arrived at at,
// before it is decoded (which may take a while for a full report): proof
// of life, as every part is. A node not heard before waits for its
// decoded heartbeat, which names its incarnation.
func (t *Tracker) Touch(node string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.nodes[node]; s != nil && at.After(s.LastSeen) {
		s.LastSeen = at
	}
}

// Synced reports whether node's copies are as of its latest report applied
// (false after a delta without a base, until the next full report).
func (t *Tracker) Synced(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.reports[node]
	return r != nil && r.Synced()
}

// report returns node's rebuilt copies, made on first use. Call with mu
// held.
func (t *Tracker) report(node string) *heartbeat.Copies {
	r := t.reports[node]
	if r == nil {
		r = &heartbeat.Copies{}
		t.reports[node] = r
	}
	return r
}

// Disconnected records an advisory, received at at, that node's
// connection conn closed, and reports whether it counts. It counts only
// if it is about the connection the host's latest heartbeat came on (or
// the host named none, or conn is unknown): an advisory about an older
// connection, processed after the host reconnected and beat on a new one
// (advisories and heartbeats travel on different connections, so nothing
// orders them), says nothing about the host now. The name alone never
// decides.
func (t *Tracker) Disconnected(node string, conn Conn, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.nodes[node]
	if s == nil {
		s = &Seen{Node: node}
		t.nodes[node] = s
	}
	if conn.Known() && s.Conn.Known() && conn != s.Conn {
		return false
	}
	s.DisconnectedAt, s.DisconnectedConn, s.StaleUntil = at, conn, time.Time{}
	return true
}

// ViewStream is View with each node's copies cut down to stream's copy (if
// it reported one): what a view of one stream needs, without copying every
// node's copies of every stream.
func (t *Tracker) ViewStream(stream string) map[string]Seen {
	return t.ViewStreams(func(yield func(string) bool) { yield(stream) })
}

// ViewStreams is View with each node's copies cut down to those of the
// named streams (nil when it reported none of them): what a round over
// some streams needs, under one lock, without copying every node's copies
// of every stream (a view per stream cost a lock and a map per node each:
// 9% of a leader's CPU while 2,500 streams failed over).
func (t *Tracker) ViewStreams(names iter.Seq[string]) map[string]Seen {
	return t.view(func(copies map[string]wire.CopyStatus) map[string]wire.CopyStatus {
		var out map[string]wire.CopyStatus
		for name := range names {
			if cs, ok := copies[name]; ok {
				if out == nil {
					out = map[string]wire.CopyStatus{}
				}
				out[name] = cs
			}
		}
		return out
	})
}

// ViewSealed is View with each node's copies cut down to the sealed ones:
// what controller.SealedReports reads, without copying the rest.
func (t *Tracker) ViewSealed() map[string]Seen {
	return t.view(func(copies map[string]wire.CopyStatus) map[string]wire.CopyStatus {
		var out map[string]wire.CopyStatus
		for name, cs := range copies {
			if cs.Sealed {
				if out == nil {
					out = map[string]wire.CopyStatus{}
				}
				out[name] = cs
			}
		}
		return out
	})
}

// View returns a copy of everything heard, by node.
func (t *Tracker) View() map[string]Seen { return t.view(maps.Clone) }

// view copies every node's Seen, with the copies that copies returns.
func (t *Tracker) view(copies func(map[string]wire.CopyStatus) map[string]wire.CopyStatus) map[string]Seen {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Seen, len(t.nodes))
	for id, s := range t.nodes {
		c := *s
		c.Copies = copies(s.Copies)
		out[id] = c
	}
	return out
}

// LastHeard returns when node's latest decoded heartbeat arrived and the
// incarnation it named, and false when none has been decoded or a
// disconnect advisory counts (no decoded heartbeat has reconnected the
// node since): recovery's proof that the incarnation that answered a seal
// is alive (recovery.Worker.LastHeard). Only decoded heartbeats count:
// an arrival merely touched (Touch) names no incarnation, and a restarted
// host's first message must not pass for its old incarnation's life.
func (t *Tracker) LastHeard(node string) (at time.Time, incarnation uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.nodes[node]
	if s == nil || s.LastDecoded.IsZero() || !s.DisconnectedAt.IsZero() {
		return time.Time{}, 0, false
	}
	return s.LastDecoded, s.Incarnation, true
}

// Incarnation returns node's incarnation as its latest decoded heartbeat
// named it, and whether the node is known.
func (t *Tracker) Incarnation(node string) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.nodes[node]; s != nil {
		return s.Incarnation, true
	}
	return 0, false
}
