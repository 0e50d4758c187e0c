package state

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/brook-streams/brook/pkg/wire"
)

// snapshotFormat is bumped when the encoding changes incompatibly, so an old
// binary refuses a snapshot it cannot read instead of misreading it.
const snapshotFormat = 1

type snapshotFile struct {
	Format int    `json:"format"`
	State  *State `json:"state"`
}

// SnapshotCopy is a deep copy of what Save writes (no index, no change
// log): the state machine takes it with applies held off, and saves the
// copy while applies go on (raftstore's concurrent snapshot), so a
// snapshot holds applies for a copy, not for an encoding and a write.
func (s *State) SnapshotCopy() *State {
	c := &State{
		Version:        s.Version,
		AssignVersion:  s.AssignVersion,
		NextStreamID:   s.NextStreamID,
		NextTransition: s.NextTransition,
		Nodes:          make(map[string]*Node, len(s.Nodes)),
		Streams:        make(map[string]*Stream, len(s.Streams)),
	}
	for k, n := range s.Nodes {
		nn := *n
		c.Nodes[k] = &nn
	}
	for k, st := range s.Streams {
		c.Streams[k] = st.Clone()
	}
	return c
}

// Save writes the whole state. encoding/json writes map keys in order, so
// equal states give equal snapshots.
func (s *State) Save(w io.Writer) error {
	if err := json.NewEncoder(w).Encode(snapshotFile{Format: snapshotFormat, State: s}); err != nil {
		return fmt.Errorf("save state snapshot: %w", err)
	}
	return nil
}

// Load reads a state written by Save.
func Load(r io.Reader) (*State, error) {
	var f snapshotFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("load state snapshot: %w", err)
	}
	if f.Format != snapshotFormat {
		return nil, fmt.Errorf("load state snapshot: format %d, this coordinator reads %d", f.Format, snapshotFormat)
	}
	if f.State == nil {
		return nil, fmt.Errorf("load state snapshot: no state")
	}
	s := f.State
	if s.Nodes == nil {
		s.Nodes = map[string]*Node{}
	}
	if s.Streams == nil {
		s.Streams = map[string]*Stream{}
	}
	for _, st := range s.Streams {
		if st.Starts == nil {
			st.Starts = []wire.HistoryStart{}
		}
	}
	// Built here, not on first use: queries run concurrently under the
	// state machine's read lock and must not write.
	s.ix()
	// The changes before the snapshot are not known: hosts that applied
	// an earlier version pull in full once.
	s.changes, s.listed = newChangeLog(s.Version), newChangeLog(s.Version)
	return s, nil
}
