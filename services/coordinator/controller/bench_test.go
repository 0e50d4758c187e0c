package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/liveness"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// benchSizes are the cluster sizes of issue 17's curve.
var benchSizes = []int{1000, 3000, 10000}

// benchCluster is a state of n streams of three copies on four live hosts,
// each created the way stream.create creates it (Place, then the state
// machine's Apply), and a liveness view that hears all four.
func benchCluster(b *testing.B, n int) (*state.State, Liveness) {
	b.Helper()
	s := state.New()
	live := Liveness{LeaderSince: t0.Add(-time.Hour), Nodes: map[string]liveness.Seen{}}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		s.Apply(state.NodeSeen(h, 1, t0.UnixMilli()))
		live.Nodes[h] = liveness.Seen{Node: h, Incarnation: 1, LastSeen: t0}
	}
	for i := range n {
		benchCreate(b, s, live, fmt.Sprintf("s%05d", i))
	}
	return s, live
}

// benchCreate is the coordinator's work for one stream.create: the read
// the admin handler makes, placement, and the state machine's apply.
func benchCreate(b *testing.B, s *state.State, live Liveness, name string) {
	benchCreateReading(b, s, live, name, false)
}

// benchCreateReading is benchCreate; all reads a deep copy of the whole
// state, as stream.create did before issue 17, instead of the placement
// view.
func benchCreateReading(b *testing.B, s *state.State, live Liveness, name string, all bool) {
	var q state.Query = state.QueryPlacement{Stream: name}
	if all {
		q = state.QueryAll{}
	}
	read := q.Run(s).(*state.State)
	owner, followers, err := PlaceWithin(read, live.Nodes, t0, params.TTL, name, 3, state.DefaultMaxCopiesPerHost)
	if err != nil {
		b.Fatal(err)
	}
	a := wire.Assignment{Owner: owner, Followers: followers, Policy: "majority_durable"}
	c := state.StreamCreate(name, 3, "", wire.Retention{}, a, t0.UnixMilli()).WithLimits(state.DefaultMaxStreams, state.DefaultMaxCopiesPerHost)
	if r := s.Apply(c); r.Err() != nil {
		b.Fatal(r.Err())
	}
}

// reads are the two ways a benchmark reads the state: "all" is the deep
// copy the coordinator read before issue 17, "view" the partial view it
// reads now; both run in one benchmark run so they compare under the same
// load.
var reads = []string{"all", "view"}

// BenchmarkCreate measures one stream.create's coordinator work (read,
// placement, apply) with n streams in the cluster; each create is undone by
// a delete (also measured) so the cluster stays at n.
func BenchmarkCreate(b *testing.B) {
	for _, read := range reads {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("read=%s/streams=%d", read, n), func(b *testing.B) {
				s, live := benchCluster(b, n)
				for b.Loop() {
					benchCreateReading(b, s, live, "new", read == "all")
					if r := s.Apply(state.StreamDelete("new", t0.UnixMilli())); r.Err() != nil {
						b.Fatal(r.Err())
					}
				}
			})
		}
	}
}

// controlRead is the control loop's read of a round (state.QueryControl).
func controlRead(s *state.State, live Liveness, now time.Time) *state.State {
	q := state.QueryControl{
		Losing: func(st *state.State) []string { return Losing(st, live, now, params) },
		Extra:  SealedReports(live),
	}
	return q.Run(s).(*state.State)
}

// BenchmarkPlanRound measures one control round of a healthy cluster of n
// streams: the control loop's read of the state and controller.Plan.
func BenchmarkPlanRound(b *testing.B) {
	for _, read := range reads {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("read=%s/streams=%d", read, n), func(b *testing.B) {
				s, live := benchCluster(b, n)
				now := t0.Add(time.Second)
				for b.Loop() {
					view := state.QueryAll{}.Run
					if read == "view" {
						view = func(s *state.State) any { return controlRead(s, live, now) }
					}
					if acts := Plan(view(s).(*state.State), live, now, params); len(acts) != 0 {
						b.Fatalf("a healthy cluster planned %d actions", len(acts))
					}
				}
			})
		}
	}
}
