package state

import (
	"reflect"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestCounts counts a hand-built state: statuses, nodes, under-replicated
// streams and pending recoveries by reason and wait.
func TestCounts(t *testing.T) {
	// Built by hand, not through Apply: its index is built on first use.
	s := &State{Nodes: map[string]*Node{}, Streams: map[string]*Stream{}}
	s.Nodes["h1"] = &Node{ID: "h1", State: wire.NodeLive}
	s.Nodes["h2"] = &Node{ID: "h2", State: wire.NodeLive}
	s.Nodes["h3"] = &Node{ID: "h3", State: wire.NodeExpired}
	s.Streams["full"] = &Stream{Name: "full", Copies: 2, Assignment: wire.Assignment{Owner: "h1", Followers: []string{"h2"}}}
	s.Streams["short"] = &Stream{Name: "short", Copies: 3, Assignment: wire.Assignment{Owner: "h2", Followers: []string{"h1"}}}
	s.Streams["lost"] = &Stream{Name: "lost", Copies: 2, Assignment: wire.Assignment{Owner: "h3", Followers: []string{"h1"}},
		Recovery: &wire.PendingRecovery{Reason: "expired"}}
	s.Streams["waits"] = &Stream{Name: "waits", Copies: 1, Assignment: wire.Assignment{Owner: "h3"},
		Recovery: &wire.PendingRecovery{Reason: "expired", Wait: &wire.RecoveryWait{Kind: "answers"}}}
	got := s.Counts()
	want := Counts{
		StreamsByStatus: map[string]int{wire.StatusServing: 2, wire.StatusRecovering: 1, wire.StatusWaiting: 1},
		UnderReplicated: 1,
		NodesByState:    map[string]int{wire.NodeLive: 2, wire.NodeExpired: 1, wire.NodeDraining: 0, wire.NodeLeft: 0},
		PendingByReason: map[string]int{"expired": 2},
		WaitingByKind:   map[string]int{"answers": 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if v := (QueryCounts{}).Run(s); !reflect.DeepEqual(v, want) {
		t.Fatalf("query %+v", v)
	}
}
