package state

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// rebuilt is the index built from scratch from the streams.
func rebuilt(s *State) *index { return indexOf(s.Streams) }

// checkIndex fails unless the index Apply kept equals one rebuilt from the
// streams (its names those of the streams, in order), and Load equals a
// count over every stream.
func checkIndex(t *testing.T, s *State, after string) {
	t.Helper()
	if got, want := s.idx.names, slices.Sorted(maps.Keys(s.Streams)); !slices.Equal(got, want) {
		t.Fatalf("after %s: index names %v, want %v", after, got, want)
	}
	if want := rebuilt(s); !reflect.DeepEqual(s.idx, want) {
		t.Fatalf("after %s: index\n got %+v\nwant %+v", after, s.idx, want)
	}
	owned, copies := map[string]int{}, map[string]int{}
	for _, st := range s.Streams {
		owned[st.Assignment.Owner]++
		for _, n := range st.Assignment.Copies() {
			copies[n]++
		}
	}
	if got, want := s.Counts(), countAll(s); !reflect.DeepEqual(got, want) {
		t.Fatalf("after %s: counts\n got %+v\nwant %+v", after, got, want)
	}
	if o, c := s.Load(); !maps.Equal(o, owned) || !maps.Equal(c, copies) || s.StreamCount() != len(s.Streams) {
		t.Fatalf("after %s: load %v %v (%d streams), want %v %v (%d)", after, o, c, s.StreamCount(), owned, copies, len(s.Streams))
	}
}

// countAll is Counts over every stream, as it was before the index.
func countAll(s *State) Counts {
	c := newCounts()
	for _, n := range s.Nodes {
		c.NodesByState[n.State]++
	}
	for _, st := range s.Streams {
		c.add(s, st)
	}
	return c
}

func TestIndexFollowsEveryCommand(t *testing.T) {
	s := threeNodes(t)
	mustApply(t, s, NodeSeen("h4", 1, 1000))
	steps := []Command{
		StreamCreate("s2", 2, "", wire.Retention{}, wire.Assignment{Owner: "h2", Followers: []string{"h3"}, Policy: "majority_durable"}, 1000),
		StreamCreate("s3", 1, "", wire.Retention{}, wire.Assignment{Owner: "h4"}, 1000),
		// Refused: the index must not move either.
		StreamCreate("s1", 1, "", wire.Retention{}, wire.Assignment{Owner: "h1"}, 1000),
		NodeExpire("h1", 7, "ttl", 2000),
	}
	for _, c := range steps {
		s.Apply(c)
		checkIndex(t, s, c.Op)
	}
	if !slices.Equal(s.Concerned(nil, nil), []string{"s1"}) {
		t.Fatalf("concerned %v, want s1 (owner expired)", s.Concerned(nil, nil))
	}
	v := s.Streams["s1"].Version
	p := wire.Assignment{Owner: "h2", Followers: []string{"h3"}, Policy: "majority_durable"}
	r := mustApply(t, s, RecoveryBegin("s1", v, p, "expired", "", "", 2100))
	checkIndex(t, s, "recovery.begin")
	if !slices.Equal(s.Pending(), []string{"s1"}) {
		t.Fatalf("pending %v", s.Pending())
	}
	mustApply(t, s, RecoveryWait("s1", r.Transition, wire.RecoveryWait{Kind: "answers"}, 2150))
	checkIndex(t, s, "recovery.wait")
	a := wire.Assignment{Stream: "s1", StreamID: 1, Epoch: 2, Owner: "h2", Followers: []string{"h3"}, Policy: "majority_durable"}
	mustApply(t, s, RecoveryCommit("s1", r.Transition, r.StreamVersion, a, wire.HistoryStart{Epoch: 2, Node: "h2"}, "", "", 2200))
	checkIndex(t, s, "recovery.commit")
	if !slices.Equal(s.Concerned(nil, nil), []string{"s1"}) || len(s.Pending()) != 0 {
		t.Fatalf("a stream short of a copy: concerned %v pending %v", s.Concerned(nil, nil), s.Pending())
	}
	// Back to three copies by a direct update, then a withdrawn recovery.
	a.Followers = []string{"h3", "h4"}
	mustApply(t, s, AssignUpdate("s1", s.Streams["s1"].Version, a, 2300))
	checkIndex(t, s, "assign.update")
	if len(s.Concerned(nil, nil)) != 0 {
		t.Fatalf("all streams healthy: concerned %v", s.Concerned(nil, nil))
	}
	mustApply(t, s, NodeSeen("h1", 8, 2400))
	s2 := s.Streams["s2"]
	mustApply(t, s, RecoveryBegin("s2", s2.Version, s2.Assignment, ReasonGrow, "", "", 2500))
	mustApply(t, s, RecoveryWithdraw("s2", 2600))
	checkIndex(t, s, "recovery.withdraw")
	if !slices.Contains(s.Concerned(nil, nil), "s2") || len(s.Pending()) != 0 {
		t.Fatalf("a fenced stream: concerned %v pending %v", s.Concerned(nil, nil), s.Pending())
	}
	mustApply(t, s, StreamUpdate("s3", wire.StreamUpdate{Retention: &wire.Retention{MaxAgeMS: 5}}, "", "", 2700))
	checkIndex(t, s, "stream.update")
	mustApply(t, s, StreamDelete("s2", 2800))
	checkIndex(t, s, "stream.delete")
	// A snapshot's reload and a clone rebuild or copy the same index.
	checkIndex(t, saveLoad(t, s), "load")
	checkIndex(t, s.Clone(), "clone")
}

func saveLoad(t *testing.T, s *State) *State {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestConcernedAndPartial(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		mustApply(t, s, NodeSeen(n, 1, 1000))
	}
	create := func(name string, copies int, owner string, followers ...string) {
		mustApply(t, s, StreamCreate(name, copies, "", wire.Retention{}, wire.Assignment{Owner: owner, Followers: followers, Policy: "majority_durable"}, 1000))
	}
	create("healthy", 3, "h1", "h2", "h3")
	create("solo", 1, "h4")
	create("lost", 2, "h4", "h1")
	create("other", 2, "h2", "h3")
	mustApply(t, s, NodeExpire("h4", 1, "ttl", 2000))
	// An owner-only stream of a lost node has nothing to fail over to.
	if got := s.Concerned(nil, nil); !slices.Equal(got, []string{"lost"}) {
		t.Fatalf("concerned %v, want [lost]", got)
	}
	// The nodes a round is about to lose, and streams named from outside.
	if got := s.Concerned([]string{"h2"}, []string{"healthy", "gone"}); !slices.Equal(got, []string{"healthy", "lost", "other"}) {
		t.Fatalf("concerned %v", got)
	}
	p := s.Partial([]string{"lost", "gone"})
	if len(p.Streams) != 1 || p.Streams["lost"] == nil || len(p.Nodes) != 4 || p.Version != s.Version || p.StreamCount() != 4 {
		t.Fatalf("partial: %d streams %d nodes version %d count %d", len(p.Streams), len(p.Nodes), p.Version, p.StreamCount())
	}
	po, pc := p.Load()
	so, sc := s.Load()
	if !maps.Equal(po, so) || !maps.Equal(pc, sc) {
		t.Fatalf("partial load %v %v, want the whole state's %v %v", po, pc, so, sc)
	}
	if !slices.Equal(p.Concerned(nil, nil), []string{"lost"}) {
		t.Fatalf("partial concerned %v", p.Concerned(nil, nil))
	}
	p.Streams["lost"].Assignment.Owner = "mutated"
	p.Nodes["h1"].State = "mutated"
	if s.Streams["lost"].Assignment.Owner != "h4" || s.Nodes["h1"].State != wire.NodeLive {
		t.Fatal("a partial view shares the state")
	}
}

func TestCreateLimits(t *testing.T) {
	s := threeNodes(t)
	a := wire.Assignment{Owner: "h1", Followers: []string{"h2"}, Policy: "majority_durable"}
	refused(t, s, StreamCreate("s2", 2, "", wire.Retention{}, a, 1000).WithLimits(1, 0), wire.CodeStreamLimit)
	// h1 and h2 hold one copy each (of s1): a cap of one refuses them.
	refused(t, s, StreamCreate("s2", 2, "", wire.Retention{}, a, 1000).WithLimits(0, 1), wire.CodeHostLimit)
	mustApply(t, s, StreamCreate("s2", 2, "", wire.Retention{}, a, 1000).WithLimits(2, 2))
	// No limits: as every create logged before they existed.
	mustApply(t, s, StreamCreate("s3", 2, "", wire.Retention{}, a, 1000))
}

func TestStreamPages(t *testing.T) {
	s := threeNodes(t)
	for _, n := range []string{"c", "a", "b", "d"} {
		mustApply(t, s, StreamCreate(n, 1, "", wire.Retention{}, wire.Assignment{Owner: "h1"}, 1000))
	}
	var got []string
	after, pages := "", 0
	for {
		p := QueryStreamPage{After: after, Limit: 2}.Run(s).(StreamPage)
		pages++
		for _, v := range p.Streams {
			got = append(got, v.Stream.Name)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if want := []string{"a", "b", "c", "d", "s1"}; !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("pages %d: %v, want %v in 3", pages, got, want)
	}
	all := QueryStreamPage{}.Run(s).(StreamPage)
	if len(all.Streams) != 5 || all.Next != "" || all.Streams[0].Status != wire.StatusServing {
		t.Fatalf("no limit: %d streams next %q", len(all.Streams), all.Next)
	}
	// A cursor need not name a stream: one deleted since its page, or
	// any name, starts the page after where it would sort.
	mustApply(t, s, StreamDelete("b", 1001))
	for _, c := range []struct {
		after string
		want  []string
	}{{"b", []string{"c", "d"}}, {"bb", []string{"c", "d"}}, {"a", []string{"c", "d"}}, {"", []string{"a", "c"}}, {"s1", nil}, {"zz", nil}} {
		p := QueryStreamPage{After: c.after, Limit: 2}.Run(s).(StreamPage)
		var got []string
		for _, v := range p.Streams {
			got = append(got, v.Stream.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("after %q: %v, want %v", c.after, got, c.want)
		}
	}
}
