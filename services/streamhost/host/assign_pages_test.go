package host

import (
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestChangesAcrossPagesLastWordWins: one pull of changes read in pages
// while x changes again between them. Page 1 assigns x here (owner at
// epoch 1); a later page names x again: moved off this host, deleted, or
// at a later epoch with this host a follower. The merged pull holds x once,
// as the later page says, and the host forgets or replaces what page 1
// said (before, page 1's owner role was kept until the next full pull).
func TestChangesAcrossPagesLastWordWins(t *testing.T) {
	page1 := wire.AssignmentSnapshot{Version: 5, Since: 1, NextSince: 3,
		Assignments: []wire.AssignedStream{one("x", 1, 1, []wire.HistoryStart{}, ""), one("y", 2, 1, []wire.HistoryStart{}, "")},
		Streams:     map[string]uint64{"x": 1, "y": 2}, Deleted: []string{"z"}}
	later := wire.AssignedStream{Assignment: wire.Assignment{Stream: "x", StreamID: 1, Epoch: 2, Owner: "n2", Followers: []string{"n1"}}, Starts: []wire.HistoryStart{}}
	for _, tc := range []struct {
		name  string
		page2 wire.AssignmentSnapshot
		want  *wire.AssignedStream // known[x] afterwards
	}{
		{"moved off", wire.AssignmentSnapshot{Version: 7, Since: 3, Streams: map[string]uint64{"x": 1}}, nil},
		{"deleted", wire.AssignmentSnapshot{Version: 7, Since: 3, Streams: map[string]uint64{}, Deleted: []string{"x"}}, nil},
		{"later epoch", wire.AssignmentSnapshot{Version: 7, Since: 3, Assignments: []wire.AssignedStream{later}, Streams: map[string]uint64{"x": 1}}, &later},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := wire.AssignmentSnapshot{Since: 1, Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{}}
			addChangesPage(&snap, page1)
			addChangesPage(&snap, tc.page2)
			if snap.Version != 7 {
				t.Errorf("version %d, want the last page's 7", snap.Version)
			}
			h := &Host{known: map[string]*wire.AssignedStream{}}
			h.cfg.Node = "n1"
			h.known["x"] = &page1.Assignments[0]
			todo := h.mergeKnown(&snap, false)
			xs := 0
			for _, as := range todo {
				if as.Assignment.Stream == "x" {
					xs++
					if tc.want == nil || as.Assignment.Epoch != tc.want.Assignment.Epoch {
						t.Errorf("x applied at epoch %d owned by %s", as.Assignment.Epoch, as.Assignment.Owner)
					}
				}
			}
			if tc.want != nil && xs != 1 {
				t.Errorf("x applied %d times, want once", xs)
			}
			k := h.known["x"]
			switch {
			case tc.want == nil && k != nil:
				t.Errorf("x still known: owner %s at epoch %d", k.Assignment.Owner, k.Assignment.Epoch)
			case tc.want != nil && (k == nil || k.Assignment.Epoch != tc.want.Assignment.Epoch):
				t.Errorf("x known as %+v, want epoch %d", k, tc.want.Assignment.Epoch)
			}
			if _, ok := h.known["y"]; !ok {
				t.Error("y, named only by page 1, was lost")
			}
			_, inStreams := snap.Streams["x"]
			if tc.name == "deleted" && inStreams {
				t.Error("a deleted x keeps its id, so its copy would be kept")
			}
			if tc.name != "deleted" && !inStreams {
				t.Error("x's id lost")
			}
		})
	}
}
