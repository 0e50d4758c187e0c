package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// hostView is what a host knows from its pulls: per stream, its id and the
// assignment that includes the host (nil if none).
type hostView map[string]*wire.AssignedStream

// fullView is the view a full pull of node gives.
func fullView(s *State, node string) (hostView, uint64) {
	snap := s.AssignmentSnapshot(node)
	v := hostView{}
	for name, id := range snap.Streams {
		v[name] = &wire.AssignedStream{Assignment: wire.Assignment{Stream: name, StreamID: id}}
	}
	for i := range snap.Assignments {
		as := snap.Assignments[i]
		v[as.Assignment.Stream] = &as
	}
	return v, snap.Version
}

// pullDelta applies node's changes since v, page by page, to view and
// returns the version applied, the pages and whether the coordinator
// answered with a full pull instead.
func pullDelta(t *testing.T, s *State, node string, view hostView, since uint64, limit int) (uint64, int, bool) {
	t.Helper()
	pages := 0
	for {
		p := s.AssignmentDelta(node, since, limit)
		pages++
		if p.Since == 0 {
			return 0, pages, true
		}
		if len(p.Streams)+len(p.Deleted) > limit {
			t.Fatalf("page of %d streams and %d deleted, limit %d", len(p.Streams), len(p.Deleted), limit)
		}
		for name, id := range p.Streams {
			view[name] = &wire.AssignedStream{Assignment: wire.Assignment{Stream: name, StreamID: id}}
		}
		for i := range p.Assignments {
			as := p.Assignments[i]
			view[as.Assignment.Stream] = &as
		}
		for _, name := range p.Deleted {
			if _, ok := p.Streams[name]; ok {
				t.Fatalf("%s both deleted and existing", name)
			}
			delete(view, name)
		}
		if p.NextSince == 0 {
			return p.Version, pages, false
		}
		if p.NextSince <= since {
			t.Fatalf("next since %d after since %d", p.NextSince, since)
		}
		since = p.NextSince
	}
}

// TestAssignmentDeltaRandom: a host that pulls only the changes since the
// version it applied, at random points of a random sequence of creates,
// deletes, recreates, retention and floor updates, added followers and
// planned moves, always holds what a full pull would give it; the log stays
// bounded, and a host behind the log's floor is answered with a full pull.
func TestAssignmentDeltaRandom(t *testing.T) {
	defer func(n int) { minChangeLog = n }(minChangeLog)
	minChangeLog = 8
	nodes := []string{"h1", "h2", "h3", "h4"}
	fulls := 0
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 17))
		s := New()
		for _, n := range nodes {
			mustApply(t, s, NodeSeen(n, 1, 0))
		}
		views := map[string]hostView{}
		applied := map[string]uint64{}
		for _, n := range nodes {
			views[n], applied[n] = fullView(s, n)
		}
		for step := range 400 {
			// Mostly a few names, recreated; sometimes a fresh one, so
			// deleted names pile up past the log's bound.
			name := fmt.Sprintf("s%d", rng.IntN(12))
			if rng.IntN(4) == 0 {
				name = fmt.Sprintf("n%d", step)
			}
			st := s.Streams[name]
			switch op := rng.IntN(6); {
			case st == nil:
				p := rng.Perm(4)
				a := wire.Assignment{Owner: nodes[p[0]], Followers: []string{nodes[p[1]]}, Policy: "majority_durable"}
				mustApply(t, s, StreamCreate(name, 2, "", wire.Retention{}, a, 0))
			case op == 0:
				mustApply(t, s, StreamDelete(name, 0))
			case op == 1:
				mustApply(t, s, StreamUpdate(name, wire.StreamUpdate{Retention: &wire.Retention{MaxRecords: uint64(step + 1)}}, "", "", 0))
			case op == 2 && len(st.Assignment.Followers) == 1:
				a := CloneAssignment(st.Assignment)
				for _, n := range nodes {
					if !a.Includes(n) {
						a.Followers = append(a.Followers, n)
						break
					}
				}
				mustApply(t, s, AssignUpdate(name, st.Version, a, 0))
			case op == 3 && st.Recovery == nil:
				p := CloneAssignment(st.Assignment)
				p.Owner, p.Followers = p.Followers[0], append([]string{p.Owner}, p.Followers[1:]...)
				r := mustApply(t, s, RecoveryBegin(name, st.Version, p, ReasonMove, "", "", 0))
				st = s.Streams[name]
				c := CloneAssignment(st.Recovery.Proposal)
				mustApply(t, s, RecoveryCommit(name, r.Transition, st.Version, c,
					wire.HistoryStart{Epoch: c.Epoch, Node: c.Owner, RecordTail: uint64(step)}, "", "", 0))
			default:
				s.Apply(NodeSeen("h1", 1, 0)) // a change of no stream
			}
			if rng.IntN(4) == 0 {
				for _, other := range s.SortedStreams() {
					if other[0] == 'n' && other != name {
						mustApply(t, s, StreamDelete(other, 0))
						break
					}
				}
			}
			for _, n := range nodes {
				// h4 pulls seldom, and falls behind the log's floor.
				if rng.IntN(3) != 0 || (n == "h4" && rng.IntN(20) != 0) {
					continue
				}
				v, _, full := pullDelta(t, s, n, views[n], applied[n], 1+rng.IntN(4))
				if full {
					fulls++
					views[n], v = fullView(s, n)
				}
				applied[n] = v
				if want, _ := fullView(s, n); !reflect.DeepEqual(views[n], want) {
					t.Fatalf("seed %d step %d: %s's view after the delta pull\n%v\nwant\n%v", seed, step, n, views[n], want)
				}
			}
			if l := len(s.changes.entries); l > len(s.Streams)+2*max(len(s.Streams), minChangeLog) {
				t.Fatalf("seed %d: change log of %d entries for %d streams", seed, l, len(s.Streams))
			}
		}
	}
	if fulls == 0 {
		t.Fatal("no host fell behind the log's floor: the full-pull answer went untested")
	}
}

// thousandStreams is a state of three live nodes and a thousand streams
// s0000 to s0999, each owned by h1 and followed by h2.
func thousandStreams(t *testing.T) *State {
	t.Helper()
	s := New()
	for _, n := range []string{"h1", "h2", "h3"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	a := wire.Assignment{Owner: "h1", Followers: []string{"h2"}, Policy: "majority_durable"}
	for i := range 1000 {
		mustApply(t, s, StreamCreate(fmt.Sprintf("s%04d", i), 2, "", wire.Retention{}, a, 0))
	}
	return s
}

// TestAssignmentDeltaCost: a pull of the changes since a version reads
// those changes only: after a thousand streams, one create gives a page
// of one stream, and a host with nothing new gets an empty page.
func TestAssignmentDeltaCost(t *testing.T) {
	s := thousandStreams(t)
	v := s.Version
	if p := s.AssignmentDelta("h1", v, 0); p.Since != v || len(p.Streams) != 0 || len(p.Assignments) != 0 || p.NextSince != 0 || p.Version != v {
		t.Fatalf("nothing changed: %+v", p)
	}
	mustApply(t, s, StreamCreate("new", 2, "", wire.Retention{}, wire.Assignment{Owner: "h2", Followers: []string{"h3"}}, 0))
	p := s.AssignmentDelta("h3", v, 0)
	if len(p.Streams) != 1 || len(p.Assignments) != 1 || p.Assignments[0].Assignment.Stream != "new" || p.Version != v+1 {
		t.Fatalf("one create: %+v", p)
	}
	if p := s.AssignmentDelta("h1", v, 0); len(p.Streams) != 1 || len(p.Assignments) != 0 {
		t.Fatalf("one create of another node's stream: %+v", p)
	}
	if got := s.PullVersion("new"); got != v+1 {
		t.Fatalf("pull version %d, want %d", got, v+1)
	}
	// Retention and the floor move a stream's pull version, not its guard
	// version.
	guard := s.Streams["s0001"].Version
	mustApply(t, s, StreamUpdate("s0001", wire.StreamUpdate{MinCopies: intp(1)}, "", "", 0))
	if s.Streams["s0001"].Version != guard || s.PullVersion("s0001") != s.Version {
		t.Fatalf("floor change: guard %d (was %d), pull version %d at %d", s.Streams["s0001"].Version, guard, s.PullVersion("s0001"), s.Version)
	}
	if p := s.AssignmentDelta("h1", v+1, 0); len(p.Assignments) != 1 || p.Assignments[0].MinCopies != 1 {
		t.Fatalf("floor change pulled as %+v", p)
	}
	// A version ahead of the state (another cluster's) and 0 get a full pull.
	for _, since := range []uint64{0, s.Version + 1} {
		if p := s.AssignmentDelta("h1", since, 10); p.Since != 0 || p.Next == "" || len(p.Streams) != 10 {
			t.Fatalf("since %d: %+v", since, p)
		}
	}
}

// TestAssignmentDeltaAfterLoad: a state loaded from a snapshot knows no
// change before it: a host that applied an earlier version gets a full
// pull, one at the snapshot's version or later its changes.
func TestAssignmentDeltaAfterLoad(t *testing.T) {
	s := threeNodes(t)
	before := s.Version
	mustApply(t, s, StreamUpdate("s1", wire.StreamUpdate{Retention: &wire.Retention{MaxRecords: 5}}, "", "", 0))
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	l, err := Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if p := l.AssignmentDelta("h1", before, 0); p.Since != 0 || len(p.Streams) != len(l.Streams) {
		t.Fatalf("since before the snapshot: %+v", p)
	}
	at := l.Version
	mustApply(t, l, StreamDelete("s1", 0))
	if p := l.AssignmentDelta("h1", at, 0); p.Since != at || !slices.Equal(p.Deleted, []string{"s1"}) || len(p.Streams) != 0 {
		t.Fatalf("since the snapshot: %+v", p)
	}
}
