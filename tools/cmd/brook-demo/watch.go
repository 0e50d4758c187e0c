package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/cmd/brook-demo/brookload"
)

// view is what the watcher saw at one poll.
type view struct {
	info wire.StreamInfo
	// victimState is the killed node's state in cluster.info ("" unknown).
	victimState string
}

// describe returns a line for each change from prev to cur that shows the
// failover (or the rejoin) as it happens.
func describe(prev, cur view, victim string, killAt time.Time) []string {
	var out []string
	if cur.victimState != "" && prev.victimState != "" && cur.victimState != prev.victimState {
		out = append(out, fmt.Sprintf("%s is %s in the coordinators' state", victim, cur.victimState))
	}
	p, c := prev.info, cur.info
	if c.Status != p.Status {
		out = append(out, fmt.Sprintf("stream status %s -> %s", p.Status, c.Status))
	}
	if c.Recovery != nil && (p.Recovery == nil || p.Recovery.Transition != c.Recovery.Transition) {
		r := c.Recovery
		line := fmt.Sprintf("pending recovery committed: owner %s lost (%s); seal every copy of epoch %d at fence epoch %d, need R=%d answers; transition %d",
			r.Old.Owner, r.Reason, r.Old.Epoch, r.Old.Epoch+1, c.R, r.Transition)
		if r.Since > 0 && !killAt.IsZero() {
			line += fmt.Sprintf(" (recorded at %+d ms)", time.UnixMilli(r.Since).Sub(killAt).Milliseconds())
		}
		out = append(out, line)
	}
	if c.Recovery != nil && c.Recovery.Wait != nil && !sameWait(c.Recovery.Wait, waitOf(p.Recovery)) {
		out = append(out, describeWait(c.Recovery.Wait))
	}
	pa, ca := p.Assignment, c.Assignment
	switch {
	case ca.Epoch != pa.Epoch || ca.Owner != pa.Owner:
		line := fmt.Sprintf("new assignment committed: owner %s, followers %v, epoch %d -> %d", ca.Owner, ca.Followers, pa.Epoch, ca.Epoch)
		if len(c.Starts) > len(p.Starts) {
			s := c.Starts[len(c.Starts)-1]
			line += fmt.Sprintf("; history start of epoch %d: record tail %d, cursor tail %d on %s", s.Epoch, s.RecordTail, s.CursorTail, s.Node)
		}
		out = append(out, line)
	case !slices.Equal(ca.Followers, pa.Followers):
		out = append(out, fmt.Sprintf("assignment changed without recovery: followers %v -> %v, epoch %d kept", pa.Followers, ca.Followers, ca.Epoch))
	}
	// The trace id shows first on the pending recovery, then as the
	// stream's last failover trace: print it once.
	if t := traceOf(c); t != "" && t != traceOf(p) && t != p.LastTraceID {
		out = append(out, "failover trace id "+t)
	}
	return out
}

// traceOf is the trace of the failover in progress, or else the last one.
func traceOf(i wire.StreamInfo) string {
	if i.Recovery != nil && i.Recovery.TraceID != "" {
		return i.Recovery.TraceID
	}
	return i.LastTraceID
}

func roleName(r string) string {
	if r == "" || r == wire.RoleNone {
		return "in no assignment"
	}
	return r
}

func waitOf(r *wire.PendingRecovery) *wire.RecoveryWait {
	if r == nil {
		return nil
	}
	return r.Wait
}

func sameWait(a, b *wire.RecoveryWait) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Kind == b.Kind && a.Answered == b.Answered && a.Needed == b.Needed &&
		slices.Equal(a.Unanswered, b.Unanswered) && a.BestTail == b.BestTail && a.BestNode == b.BestNode
}

func describeWait(w *wire.RecoveryWait) string {
	switch w.Kind {
	case "answers":
		return fmt.Sprintf("recovery waits: %d of the %d seal answers it needs (no answer from %v)", w.Answered, w.Needed, w.Unanswered)
	case "confirmed_prefix":
		start := "?"
		if w.Start != nil {
			start = fmt.Sprintf("record tail %d of epoch %d on %s", w.Start.RecordTail, w.Start.Epoch, w.Start.Node)
		}
		return fmt.Sprintf("recovery waits for a copy holding the confirmed prefix (%s); best sealed tail %d on %s", start, w.BestTail, w.BestNode)
	default:
		return fmt.Sprintf("recovery waits (%s)", w.Kind)
	}
}

// describeCopy returns a line when a host reports its copy of the stream
// in another role, epoch or seal state than before (seen is false for the
// first report), or "" when nothing changed.
func describeCopy(node string, prev wire.CopyStatus, seen bool, cur wire.CopyStatus) string {
	if seen && prev.Role == cur.Role && prev.Epoch == cur.Epoch && prev.Sealed == cur.Sealed {
		return ""
	}
	var line string
	if cur.Sealed && (!seen || !prev.Sealed) {
		line = fmt.Sprintf("%s sealed its copy (fenced: it takes nothing more from epoch %d): record tail %d, cursor tail %d",
			node, cur.Epoch, cur.RecordTail, cur.CursorTail)
	} else {
		line = fmt.Sprintf("%s reports its copy: %s at epoch %d, record tail %d", node, roleName(cur.Role), cur.Epoch, cur.RecordTail)
	}
	if seen && cur.RecordTail < prev.RecordTail {
		line += fmt.Sprintf(" (cut back from %d onto the new owner's history)", prev.RecordTail)
	}
	return line
}

// choiceLine explains the recovery's choice from the sealed copies' tails
// as their hosts reported them.
func choiceLine(owner string, sealed map[string]wire.CopyStatus, r int) string {
	nodes := make([]string, 0, len(sealed))
	for n := range sealed {
		nodes = append(nodes, n)
	}
	// The recovery's order: record tail, then cursor tail, then lowest id.
	sort.Slice(nodes, func(i, j int) bool {
		a, b := sealed[nodes[i]], sealed[nodes[j]]
		if a.RecordTail != b.RecordTail {
			return a.RecordTail > b.RecordTail
		}
		if a.CursorTail != b.CursorTail {
			return a.CursorTail > b.CursorTail
		}
		return nodes[i] < nodes[j]
	})
	if len(nodes) == 0 {
		return fmt.Sprintf("chose %s (no sealed copy reported its tails in time to show them)", owner)
	}
	var tails []string
	for _, n := range nodes {
		tails = append(tails, fmt.Sprintf("%s %d/%d", n, sealed[n].RecordTail, sealed[n].CursorTail))
	}
	how := "the furthest record tail (ties: cursor tail, then lowest node id)"
	if nodes[0] != owner {
		how = "not the furthest of the reports seen here"
	}
	return fmt.Sprintf("chose %s: %s among %d sealed copies, R=%d needed (record/cursor tails: %s)", owner, how, len(nodes), r, strings.Join(tails, ", "))
}

// watcher shows the failover as it happens: it polls stream.info and
// cluster.info every 20 ms and prints each change, and it overhears the
// hosts' heartbeats to show their copies change (sealed, promoted,
// following). It only listens to plain publishes: a subscriber on a
// request subject (a seal, say) would count as a responder and hide the
// "no responders" a request to a dead host gets at once.
type watcher struct {
	con    *console
	nc     *nats.Conn
	info   brookload.InfoFunc
	ci     func(ctx context.Context) (wire.ClusterInfo, error)
	stream string
	victim string
	killAt time.Time

	mu        sync.Mutex
	copies    map[string]wire.CopyStatus // each node's last report
	sealed    map[string]wire.CopyStatus // reports of sealed copies since the kill
	last      view
	servingAt time.Time // first poll that showed the failover done
	served    wire.StreamInfo
	oldEpoch  uint64
	sub       *nats.Subscription
	// sawRecovery: a poll showed the pending recovery of this failover.
	sawRecovery bool
}

// startWatch begins overhearing heartbeats. base is the stream's info
// before the kill; call run after the kill.
func startWatch(con *console, nc *nats.Conn, info brookload.InfoFunc, ci func(context.Context) (wire.ClusterInfo, error),
	stream, victim string, base view) (*watcher, error) {
	w := &watcher{con: con, nc: nc, info: info, ci: ci, stream: stream, victim: victim,
		copies: map[string]wire.CopyStatus{}, sealed: map[string]wire.CopyStatus{},
		last: base, oldEpoch: base.info.Assignment.Epoch}
	for _, ct := range base.info.CopyTails {
		if ct.Published {
			w.copies[ct.Node] = wire.CopyStatus{Stream: stream, Role: ct.Role, Epoch: ct.Epoch, RecordTail: ct.RecordTail, CursorTail: ct.CursorTail, Sealed: ct.Sealed}
		}
	}
	sub, err := nc.Subscribe(wire.HeartbeatWildcard, w.onHeartbeat)
	if err != nil {
		return nil, fmt.Errorf("overhear heartbeats: %w", err)
	}
	w.sub = sub
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("overhear heartbeats: %w", err)
	}
	return w, nil
}

// onHeartbeat prints a change of a copy of the stream as its host reports it.
func (w *watcher) onHeartbeat(m *nats.Msg) {
	now := time.Now()
	var hb wire.Heartbeat
	if json.Unmarshal(m.Data, &hb) != nil {
		return
	}
	for _, cur := range hb.Copies {
		if cur.Stream != w.stream {
			continue
		}
		w.mu.Lock()
		prev, seen := w.copies[hb.Node]
		w.copies[hb.Node] = cur
		if cur.Sealed && !w.killAt.IsZero() {
			w.sealed[hb.Node] = cur
		}
		w.mu.Unlock()
		if line := describeCopy(hb.Node, prev, seen, cur); line != "" {
			w.con.Event(now, "%s", line)
		}
	}
}

// pollEvery spaces the watcher's polls of stream.info and cluster.info.
const pollEvery = 20 * time.Millisecond

// run polls until ctx ends; events are stamped relative to killAt.
func (w *watcher) run(ctx context.Context, killAt time.Time) {
	w.mu.Lock()
	w.killAt = killAt
	w.mu.Unlock()
	defer func() { _ = w.sub.Unsubscribe() }()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.pollOnce(ctx)
	}
}

func (w *watcher) pollOnce(ctx context.Context) {
	info, err := w.info(ctx)
	if err != nil {
		return // a coordinator busy or between leaders: the next poll
	}
	cur := view{info: info}
	if ci, err := w.ci(ctx); err == nil {
		for _, n := range ci.Nodes {
			if n.Node == w.victim {
				cur.victimState = n.State
			}
		}
	}
	now := time.Now() // when both answers were in
	w.mu.Lock()
	prev := w.last
	if cur.victimState == "" {
		cur.victimState = prev.victimState
	}
	w.last = cur
	first := w.servingAt.IsZero() && brookload.FailedOver(info, w.victim, w.oldEpoch)
	if first {
		w.servingAt, w.served = now, info
	}
	sealed := make(map[string]wire.CopyStatus, len(w.sealed))
	for n, s := range w.sealed {
		if slices.Contains(prev.info.Assignment.Copies(), n) {
			sealed[n] = s
		}
	}
	killAt := w.killAt
	moved := info.Assignment.Epoch > prev.info.Assignment.Epoch && info.Assignment.Epoch > w.oldEpoch
	missed := moved && !w.sawRecovery && info.Recovery == nil
	if info.Recovery != nil {
		w.sawRecovery = true
	}
	w.mu.Unlock()
	if missed {
		w.con.Event(now, "(the pending recovery was recorded, sealed and committed between two polls %v apart)", pollEvery)
	}
	for _, line := range describe(prev, cur, w.victim, killAt) {
		w.con.Event(now, "%s", line)
	}
	if moved {
		w.con.Event(now, "%s", choiceLine(info.Assignment.Owner, sealed, prev.info.R))
	}
	if first {
		w.con.Event(now, "the stream serves again under %s at epoch %d, without an operator", info.Assignment.Owner, info.Assignment.Epoch)
	}
}

// failedOver returns the info of the first poll that showed the stream
// serving under a new owner, and when (zero if not yet).
func (w *watcher) failedOver() (wire.StreamInfo, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.served, w.servingAt
}
