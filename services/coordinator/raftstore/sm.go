package raftstore

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

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

// machine adapts state.State to Dragonboat's IConcurrentStateMachine. A
// regular IStateMachine has Dragonboat hold applies off for the whole of a
// snapshot's save: the JSON encoding and write of every stream, which grows
// with the cluster (tens of milliseconds at 10,000 streams, more on a
// loaded machine), every snapshotEntries entries, while every create in
// flight waits (issue 17). Here a snapshot holds applies off only for
// PrepareSnapshot's copy of the state, and the copy is encoded and written
// while applies go on. Dragonboat runs Lookup concurrently with Update for
// such a machine: mu is machine's own, Update and RecoverFromSnapshot
// write under it, Lookup and PrepareSnapshot read under it.
type machine struct {
	mu sync.RWMutex
	st *state.State
	// since counts the entries applied since the state was last prepared
	// for a snapshot or recovered from one (from the start on a replica
	// without a snapshot): on a restart Dragonboat recovers the newest
	// snapshot and replays the entries after it through Update, so the
	// count is always the entries since the newest snapshot. streams is
	// the state's number of streams. Store.snapshotLoop reads both.
	since   atomic.Uint64
	streams atomic.Int64
}

func newMachine(uint64, uint64) sm.IConcurrentStateMachine { return &machine{st: state.New()} }

// Update applies a batch of entries. An entry that does not decode is
// refused as a result, not returned as an error: an error would halt the
// replica, and every replica would halt on the same entry.
func (m *machine) Update(es []sm.Entry) ([]sm.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range es {
		r, err := m.apply(es[i])
		if err != nil {
			return nil, err
		}
		es[i].Result = r
	}
	m.since.Add(uint64(len(es)))
	m.streams.Store(int64(len(m.st.Streams)))
	return es, nil
}

// apply applies one entry. Under mu.
func (m *machine) apply(e sm.Entry) (sm.Result, error) {
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

// Lookup runs a state.Query under mu's read lock.
func (m *machine) Lookup(q any) (any, error) {
	query, ok := q.(state.Query)
	if !ok {
		return nil, fmt.Errorf("raftstore: unknown query type %T", q)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return query.Run(m.st), nil
}

// PrepareSnapshot copies the state to be saved (Dragonboat holds Update
// off meanwhile): the copy is the snapshot's only input.
func (m *machine) PrepareSnapshot() (any, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	m.since.Store(0)
	return m.st.SnapshotCopy(), nil
}

// SaveSnapshot writes the copy PrepareSnapshot took, while applies go on.
func (m *machine) SaveSnapshot(ctx any, w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	st, ok := ctx.(*state.State)
	if !ok {
		return fmt.Errorf("raftstore: snapshot of %T, want the state PrepareSnapshot copied", ctx)
	}
	return st.Save(w)
}

func (m *machine) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	st, err := state.Load(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.st = st
	m.since.Store(0)
	m.streams.Store(int64(len(st.Streams)))
	m.mu.Unlock()
	return nil
}

func (m *machine) Close() error { return nil }
