// Package assigntest stands in for the coordinator in the stream host's
// tests, which drive hosts with assignments they choose: a Table holds the
// assignments, answers the hosts' pulls and announces each change.
package assigntest

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Table is a test's assignment state: what a coordinator would hold. It is
// safe for concurrent use.
type Table struct {
	mu      sync.Mutex
	version uint64
	assigns map[string]wire.AssignedStream // by stream
	streams map[string]uint64              // stream -> stream id
}

// NewTable returns an empty table at version 0.
func NewTable() *Table {
	return &Table{assigns: map[string]wire.AssignedStream{}, streams: map[string]uint64{}}
}

// Set replaces the assignments of the given streams and returns the new
// version. A nil history-start list is sent as an empty one, as the
// coordinator does; tests of a withheld list build the reply themselves.
func (t *Table) Set(as ...wire.AssignedStream) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range as {
		if a.Starts == nil {
			a.Starts = []wire.HistoryStart{}
		}
		t.assigns[a.Assignment.Stream] = a
		t.streams[a.Assignment.Stream] = a.Assignment.StreamID
	}
	t.version++
	return t.version
}

// Bump advances the version without changing an assignment (as any other
// committed change does) and returns it.
func (t *Table) Bump() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version++
	return t.version
}

// Snapshot is what a coordinator answers node's pull with: the assignments
// that include node, and the id of every existing stream.
func (t *Table) Snapshot(node string) wire.AssignmentSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	snap := wire.AssignmentSnapshot{Version: t.version, Node: node, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
	for _, as := range t.assigns {
		if as.Assignment.Includes(node) {
			snap.Assignments = append(snap.Assignments, as)
		}
	}
	for k, v := range t.streams {
		snap.Streams[k] = v
	}
	return snap
}

// ServePull answers a host's pull request (wire.AssignPull). A request that
// does not decode gets no answer, as from a coordinator that cannot read it.
func (t *Table) ServePull(m *nats.Msg) {
	var req wire.AssignmentPull
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return
	}
	data, _ := json.Marshal(t.Snapshot(req.Node))
	_ = m.Respond(data)
}

// Notify publishes a change notice of version to each node and flushes.
func Notify(nc *nats.Conn, version uint64, nodes []string) {
	data, _ := json.Marshal(wire.AssignNotice{Version: version})
	for _, n := range nodes {
		_ = nc.Publish(wire.AssignNoticeSubject(n), data)
	}
	_ = nc.Flush()
}
