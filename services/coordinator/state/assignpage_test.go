package state

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestAssignmentPagesAddUpToTheSnapshot: the pages of a node's pull, each
// at most the page size, hold together exactly the snapshot of one
// message: the node's assignments in order, and every stream's id.
func TestAssignmentPagesAddUpToTheSnapshot(t *testing.T) {
	s := New()
	for _, n := range []string{"h1", "h2", "h3", "h4"} {
		mustApply(t, s, NodeSeen(n, 1, 0))
	}
	nodes := []string{"h1", "h2", "h3", "h4"}
	for i := range 25 {
		a := wire.Assignment{Owner: nodes[i%4], Followers: []string{nodes[(i+1)%4]}, Policy: "majority_durable"}
		mustApply(t, s, StreamCreate(fmt.Sprintf("s%02d", i), 2, "", wire.Retention{}, a, 0))
	}
	for _, node := range nodes {
		want := s.AssignmentSnapshot(node)
		got := wire.AssignmentSnapshot{Version: want.Version, Node: node, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
		pages, after := 0, ""
		for {
			p := s.AssignmentPage(node, after, 4)
			pages++
			if len(p.Streams) > 4 || p.Version != want.Version || p.Node != node {
				t.Fatalf("%s page %d: %d streams, version %d", node, pages, len(p.Streams), p.Version)
			}
			got.Assignments = append(got.Assignments, p.Assignments...)
			for k, v := range p.Streams {
				got.Streams[k] = v
			}
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if pages != 7 {
			t.Fatalf("%s: %d pages of 4 for 25 streams, want 7", node, pages)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: pages add up to\n%+v\nwant\n%+v", node, got, want)
		}
	}
	// A page size of 0 or past the maximum is the maximum.
	if p := s.AssignmentPage("h1", "", 0); p.Next != "" || len(p.Streams) != 25 {
		t.Fatalf("default page: next %q, %d streams", p.Next, len(p.Streams))
	}
	if p := s.AssignmentPage("h1", "s24", 0); p.Next != "" || len(p.Streams) != 0 || p.Assignments == nil {
		t.Fatalf("page after the last stream: %+v", p)
	}
}
