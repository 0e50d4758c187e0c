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
	s.changes = newChangeLog(s.Version)
	return s, nil
}
