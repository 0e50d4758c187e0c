package raftstore

import (
	"encoding/json"
	"fmt"
	"io"

	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// Result values in sm.Result.Value: the details are in Data (a JSON
// state.Result) either way.
const (
	resultOK      = 0
	resultRefused = 1
)

// machine adapts state.State to Dragonboat's IStateMachine. Dragonboat
// serialises Update/RecoverFromSnapshot against Lookup/SaveSnapshot with its
// own RWMutex, so machine needs no lock of its own.
type machine struct {
	st *state.State
}

func newMachine(uint64, uint64) sm.IStateMachine { return &machine{st: state.New()} }

// Update applies one entry. An entry that does not decode is refused as a
// result, not returned as an error: an error would halt the replica, and
// every replica would halt on the same entry.
func (m *machine) Update(e sm.Entry) (sm.Result, error) {
	var r state.Result
	c, err := state.DecodeCommand(e.Cmd)
	if err != nil {
		r = state.Result{Code: wire.CodeBadRequest, Message: err.Error(), Version: m.st.Version}
	} else {
		r = m.st.Apply(c)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return sm.Result{}, fmt.Errorf("encode result: %w", err)
	}
	v := uint64(resultOK)
	if r.Code != "" {
		v = resultRefused
	}
	return sm.Result{Value: v, Data: data}, nil
}

// Lookup runs a state.Query under Dragonboat's read lock.
func (m *machine) Lookup(q any) (any, error) {
	query, ok := q.(state.Query)
	if !ok {
		return nil, fmt.Errorf("raftstore: unknown query type %T", q)
	}
	return query.Run(m.st), nil
}

func (m *machine) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return m.st.Save(w)
}

func (m *machine) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	st, err := state.Load(r)
	if err != nil {
		return err
	}
	m.st = st
	return nil
}

func (m *machine) Close() error { return nil }
