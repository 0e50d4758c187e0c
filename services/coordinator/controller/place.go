package controller

import (
	"cmp"
	"hash/fnv"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// Place chooses where stream's copies go: copies distinct nodes that are
// up (see Up). The owner is the node that owns the fewest streams (then
// holds the fewest copies, then the lowest id); the followers are the nodes
// holding the fewest copies (then owning the fewest, then by tieRank, the
// id breaking only a tie of hashes). So owners and copies spread evenly as
// streams are created one by one, and the streams one host owns have their
// followers on every set of the other hosts alike, not all on the same
// ones (docs/architecture.md: why, and the copysets trade-off).
func Place(s *state.State, live map[string]liveness.Seen, now time.Time, ttl time.Duration, stream string, copies int) (owner string, followers []string, err error) {
	return PlaceWithin(s, live, now, ttl, stream, copies, 0)
}

// PlaceWithin is Place on the nodes that hold fewer than maxPerHost copies
// (0: no limit); too few such nodes is a wire.CodeHostLimit error. It reads
// the nodes and the state's load counts only (state.Load), never the
// streams, so s may be a state.Partial view.
func PlaceWithin(s *state.State, live map[string]liveness.Seen, now time.Time, ttl time.Duration, stream string, copies, maxPerHost int) (owner string, followers []string, err error) {
	owned, held := s.Load()
	var up, room []string
	for _, id := range s.SortedNodes() {
		if Up(s, live, id, now, ttl) {
			up = append(up, id)
			if maxPerHost <= 0 || held[id] < maxPerHost {
				room = append(room, id)
			}
		}
	}
	if len(up) < copies {
		return "", nil, wire.Errorf(wire.CodeUnavailable, "%d copies need %d live stream hosts, %d are live", copies, copies, len(up))
	}
	if len(room) < copies {
		return "", nil, wire.Errorf(wire.CodeHostLimit, "%d copies need %d live stream hosts below %d copies (--max-copies-per-host), %d of the %d live are",
			copies, copies, maxPerHost, len(room), len(up))
	}
	up = room
	byOwned := slices.Clone(up)
	slices.SortStableFunc(byOwned, func(a, b string) int {
		return cmp.Or(cmp.Compare(owned[a], owned[b]), cmp.Compare(held[a], held[b]), cmp.Compare(a, b))
	})
	owner = byOwned[0]
	rest := slices.DeleteFunc(slices.Clone(up), func(n string) bool { return n == owner })
	slices.SortStableFunc(rest, func(a, b string) int {
		return cmp.Or(cmp.Compare(held[a], held[b]), cmp.Compare(owned[a], owned[b]),
			cmp.Compare(tieRank(stream, b), tieRank(stream, a)), cmp.Compare(a, b))
	})
	return owner, append([]string{}, rest[:copies-1]...), nil
}

// tieRank orders the nodes of equal load for stream's followers: a hash
// of the stream's name and the node (rendezvous hashing), the same on
// every coordinator and in every run, and different from stream to
// stream.
func tieRank(stream, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(stream))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}
