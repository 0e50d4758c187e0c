package recovery

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestAcceptLoss(t *testing.T) {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 6, Owner: "b", Followers: []string{"c", "d", "e"}, Policy: "majority_durable"}
	proposal := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 7, Owner: "c", Followers: []string{"d", "f"}, Policy: "majority_durable"}
	starts := []wire.HistoryStart{{Epoch: 6, RecordTail: 40, CursorTail: 7, Node: "b"}, {Epoch: 2, RecordTail: 12, Node: "a"}}
	copies := []CopyTails{
		{Node: "b", Live: false, Published: true, Epoch: 6, RecordTail: 45, CursorTail: 9}, // the lost owner
		{Node: "c", Live: true, Published: true, Epoch: 6, RecordTail: 31, CursorTail: 5},
		{Node: "d", Live: true, Published: true, Epoch: 6, RecordTail: 38, CursorTail: 2},
		{Node: "e", Live: true, Published: false},
		{Node: "x", Live: true, Published: true, Epoch: 6, RecordTail: 99}, // holds no copy of old
	}

	t.Run("named node: start from its heartbeat tails", func(t *testing.T) {
		a, start, below, err := AcceptLoss(old, proposal, starts, copies, "c")
		if err != nil {
			t.Fatal(err)
		}
		want := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 7, Owner: "c", Followers: []string{"d", "e", "f"}, Policy: "majority_durable"}
		if !reflect.DeepEqual(a, want) {
			t.Errorf("assignment = %+v\nwant         %+v", a, want)
		}
		if start == nil || *start != (wire.HistoryStart{Epoch: 7, RecordTail: 31, CursorTail: 5, Node: "c"}) {
			t.Errorf("start = %+v, want epoch 7, 31/5 on c", start)
		}
		if !below {
			t.Error("31 < 40: must be flagged below the confirmed prefix")
		}
	})
	t.Run("unnamed: furthest live published copy", func(t *testing.T) {
		a, start, below, err := AcceptLoss(old, proposal, starts, copies, "")
		if err != nil {
			t.Fatal(err)
		}
		if a.Owner != "d" || start == nil || start.RecordTail != 38 || !below {
			t.Errorf("got owner %q start %+v below %v; want d (38, the dead b's 45 does not count), below", a.Owner, start, below)
		}
	})
	t.Run("unnamed: ties as in Decide", func(t *testing.T) {
		tied := []CopyTails{
			{Node: "e", Live: true, Published: true, Epoch: 6, RecordTail: 50, CursorTail: 3},
			{Node: "d", Live: true, Published: true, Epoch: 6, RecordTail: 50, CursorTail: 3},
			{Node: "c", Live: true, Published: true, Epoch: 6, RecordTail: 50, CursorTail: 2},
		}
		a, _, below, err := AcceptLoss(old, proposal, starts, tied, "")
		if err != nil || a.Owner != "d" || below {
			t.Errorf("got %q below %v err %v; want d (cursor tie-break, then lowest id), not below", a.Owner, below, err)
		}
	})
	t.Run("published nothing: no start, below while a start exists", func(t *testing.T) {
		a, start, below, err := AcceptLoss(old, proposal, starts, copies, "e")
		if err != nil {
			t.Fatal(err)
		}
		if a.Owner != "e" || start != nil || !below {
			t.Errorf("got owner %q start %+v below %v; want e, no start, below", a.Owner, start, below)
		}
		// Tails of a copy that published nothing are not evidence, whatever
		// they hold.
		stale := []CopyTails{{Node: "e", Live: true, Published: false, RecordTail: 50, CursorTail: 9}}
		_, start, below, err = AcceptLoss(old, proposal, starts, stale, "e")
		if err != nil || start != nil || !below {
			t.Errorf("unpublished with stale tails: start %+v below %v err %v; want nil, below", start, below, err)
		}
		_, start, below, err = AcceptLoss(old, proposal, nil, copies, "e")
		if err != nil || start != nil || below {
			t.Errorf("no starts: start %+v below %v err %v; want nil, false", start, below, err)
		}
	})
	t.Run("at the prefix is not below", func(t *testing.T) {
		at := []CopyTails{{Node: "c", Live: true, Published: true, Epoch: 6, RecordTail: 40}}
		_, _, below, err := AcceptLoss(old, proposal, starts, at, "c")
		if err != nil || below {
			t.Errorf("below %v err %v; want not below", below, err)
		}
	})
	t.Run("unnamed prefers a published copy", func(t *testing.T) {
		only := []CopyTails{{Node: "c", Live: true}, {Node: "e", Live: true, Published: true, Epoch: 6, RecordTail: 0}}
		a, start, _, err := AcceptLoss(old, proposal, starts, only, "")
		if err != nil || a.Owner != "e" || start == nil {
			t.Errorf("got %q start %+v err %v; want e with a start", a.Owner, start, err)
		}
	})
	for _, c := range []struct{ name, node, msg string }{
		{"named node holds no copy", "x", "holds no copy"},
		{"named node not live", "b", "not live"},
		{"named node unknown", "zz", "holds no copy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, _, err := AcceptLoss(old, proposal, starts, copies, c.node); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v, want one saying %q", err, c.msg)
			}
		})
	}
	t.Run("no live copy", func(t *testing.T) {
		if _, _, _, err := AcceptLoss(old, proposal, starts, copies[:1], ""); err == nil {
			t.Error("want an error when no copy is live")
		}
	})
}

// TestAcceptLossRanksAtTheCut: AcceptLoss lowers each copy's published
// tails to the cut its host will make, from the copy's published epoch,
// before ranking, recording the start and judging the prefix. Epoch 6's
// owner b started at 40 and confirmed 40..44 on b and d (W = 2 of 3), then
// was lost. c never applied the role change to epoch 6: it publishes epoch
// 4 and the raw tail 50, the epoch-4 owner's unconfirmed suffix. Ranked by
// the raw tail c would win and be recorded at 50; its host then cuts it to
// 40 and d's confirmed 40..44 are lost while the stream claims a start
// past them.
func TestAcceptLossRanksAtTheCut(t *testing.T) {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 6, Owner: "b", Followers: []string{"c", "d"}, Policy: "majority_durable"}
	proposal := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 7, Owner: "c", Followers: []string{"d"}, Policy: "majority_durable"}
	starts := []wire.HistoryStart{{Epoch: 2, RecordTail: 12, CursorTail: 1, Node: "a"}, {Epoch: 6, RecordTail: 40, CursorTail: 7, Node: "b"}}
	stale := CopyTails{Node: "c", Live: true, Published: true, Epoch: 4, RecordTail: 50, CursorTail: 9}
	current := CopyTails{Node: "d", Live: true, Published: true, Epoch: 6, RecordTail: 45, CursorTail: 8}
	dead := CopyTails{Node: "b", Published: true, Epoch: 6, RecordTail: 47, CursorTail: 9}

	a, start, below, err := AcceptLoss(old, proposal, starts, []CopyTails{dead, stale, current}, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Owner != "d" || start == nil || *start != (wire.HistoryStart{Epoch: 7, RecordTail: 45, CursorTail: 8, Node: "d"}) || below {
		t.Fatalf("got owner %q start %+v below %v; want d at 45/8 (c ranks at its cut 40/7), not below", a.Owner, start, below)
	}
	if !slices.Equal(a.Followers, []string{"c"}) {
		t.Errorf("followers %v, want [c] (cut, then it catches up)", a.Followers)
	}

	// Named, the stale copy is recorded at its cut, which is where its host
	// starts, and that is at the prefix, not past it.
	_, start, below, err = AcceptLoss(old, proposal, starts, []CopyTails{dead, stale, current}, "c")
	if err != nil || start == nil || *start != (wire.HistoryStart{Epoch: 7, RecordTail: 40, CursorTail: 7, Node: "c"}) || below {
		t.Fatalf("named c: start %+v below %v err %v; want 40/7, not below", start, below, err)
	}

	// Two starts after its epoch: the cut is the lowest of them, below the
	// latest start, so the promotion is below the confirmed prefix even
	// though the raw tail is past it.
	starts3 := []wire.HistoryStart{{Epoch: 5, RecordTail: 30, CursorTail: 4, Node: "x"}, starts[1]}
	_, start, below, err = AcceptLoss(old, proposal, starts3, []CopyTails{stale}, "c")
	if err != nil || start == nil || start.RecordTail != 30 || start.CursorTail != 4 || !below {
		t.Fatalf("cut below the prefix: start %+v below %v err %v; want 30/4, below", start, below, err)
	}

	// A copy on the current history keeps its tails however far ahead.
	ahead := CopyTails{Node: "d", Live: true, Published: true, Epoch: 6, RecordTail: 90, CursorTail: 20}
	_, start, below, err = AcceptLoss(old, proposal, starts, []CopyTails{ahead}, "")
	if err != nil || start == nil || start.RecordTail != 90 || start.CursorTail != 20 || below {
		t.Fatalf("current history: start %+v below %v err %v; want 90/20", start, below, err)
	}
}
