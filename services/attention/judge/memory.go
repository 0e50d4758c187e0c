package judge

import (
	"strconv"
	"time"
)

// Memory is what the judge remembers between calls: since when each listed
// entry has been listed, and each follower's tail history. It is not safe
// for concurrent use; the caller serialises calls to Judge.
type Memory struct {
	since map[string]time.Time
	lag   map[lagKey]*lagTrack
}

// NewMemory returns an empty Memory, as after a restart.
func NewMemory() *Memory {
	return &Memory{since: map[string]time.Time{}, lag: map[lagKey]*lagTrack{}}
}

// lagKey names one follower copy at one epoch; a new epoch or a recreated
// stream starts a new track.
type lagKey struct {
	stream   string
	streamID uint64
	epoch    uint64
	follower string
}

// lagTrack is how long a follower's tail has stood still below its owner's.
type lagTrack struct {
	tail        uint64    // the follower's record tail when last judged
	behindSince time.Time // zero while caught up; else since when the tail has stood still below the owner's
	ownerThen   uint64    // the owner's record tail at behindSince
	touched     bool      // judged this round; untouched tracks are dropped
}

// track returns the track of k, creating it if the follower is new, and
// marks it as still wanted.
func (m *Memory) track(k lagKey) (tr *lagTrack, isNew bool) {
	tr, ok := m.lag[k]
	if !ok {
		tr = &lagTrack{}
		m.lag[k] = tr
	}
	tr.touched = true
	return tr, !ok
}

// endRound drops the tracks of followers that no longer exist (or whose
// stream left the judged state, e.g. while it recovers).
func (m *Memory) endRound() {
	for k, tr := range m.lag {
		if !tr.touched {
			delete(m.lag, k)
			continue
		}
		tr.touched = false
	}
}

// stamp returns, for each key, since when it has been listed (now for a new
// one), and forgets every key not listed now.
func (m *Memory) stamp(keys []string, now time.Time) []time.Time {
	out := make([]time.Time, len(keys))
	listed := make(map[string]bool, len(keys))
	for i, k := range keys {
		t, ok := m.since[k]
		if !ok {
			t = now
			m.since[k] = t
		}
		out[i] = t
		listed[k] = true
	}
	for k := range m.since {
		if !listed[k] {
			delete(m.since, k)
		}
	}
	return out
}

// entryKey identifies an entry across calls. The stream id is part of it so
// that a recreated stream of the same name starts afresh.
func entryKey(kind, stream string, streamID uint64, node string) string {
	return kind + "\x00" + stream + "\x00" + strconv.FormatUint(streamID, 10) + "\x00" + node
}
