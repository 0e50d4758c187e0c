package raftstore

import (
	"bytes"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/brook-streams/brook/services/coordinator/state"
)

// TestSnapshotSavesThePreparedState checks the concurrent machine's
// snapshot: what PrepareSnapshot copied is what SaveSnapshot writes, even
// when entries are applied between the two (as Dragonboat lets them be),
// and recovering from it gives that state.
func TestSnapshotSavesThePreparedState(t *testing.T) {
	m := newMachine(1, 1)
	update := func(index uint64, c state.Command) {
		t.Helper()
		es, err := m.Update([]sm.Entry{{Index: index, Cmd: c.Encode()}})
		if err != nil || es[0].Result.Value != resultOK {
			t.Fatalf("apply %s: %v %s", c.Op, err, es[0].Result.Data)
		}
	}
	for i, h := range benchHosts {
		update(uint64(i+1), state.NodeSeen(h, 1, 1000))
	}
	update(5, benchCreateCmd("before", 0))
	ctx, err := m.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	update(6, benchCreateCmd("after", 1))
	var buf bytes.Buffer
	if err := m.SaveSnapshot(ctx, &buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	r := newMachine(1, 1)
	if err := r.RecoverFromSnapshot(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	v, err := r.Lookup(state.QueryAll{})
	if err != nil {
		t.Fatal(err)
	}
	st := v.(*state.State)
	if st.Streams["before"] == nil || st.Streams["after"] != nil || len(st.Nodes) != len(benchHosts) {
		t.Fatalf("recovered %d streams (before: %v, after: %v), %d nodes; want the state as prepared",
			len(st.Streams), st.Streams["before"] != nil, st.Streams["after"] != nil, len(st.Nodes))
	}
}
