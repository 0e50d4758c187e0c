// Package assigntest stands in for the coordinator's assignment pull in the
// stream host's tests, which drive hosts with assignments they choose
// instead of running coordinators.
package assigntest

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// Snapshot is what a coordinator answers node's pull with: the assignments
// (by stream) that include node, and the id of every existing stream.
func Snapshot(version uint64, node string, assigns map[string]wire.AssignedStream, streams map[string]uint64) wire.AssignmentSnapshot {
	snap := wire.AssignmentSnapshot{Version: version, Node: node, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
	for _, as := range assigns {
		if as.Assignment.Includes(node) {
			snap.Assignments = append(snap.Assignments, as)
		}
	}
	for k, v := range streams {
		snap.Streams[k] = v
	}
	return snap
}

// Respond answers the pull request m with the snapshot that snapshot
// returns for the requesting node; a request that does not decode gets no
// answer, as a host would see from a coordinator that cannot read it.
func Respond(m *nats.Msg, snapshot func(node string) wire.AssignmentSnapshot) {
	var req wire.AssignmentPull
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return
	}
	data, _ := json.Marshal(snapshot(req.Node))
	_ = m.Respond(data)
}
