package recovery

import (
	"reflect"
	"strings"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestAcceptLoss(t *testing.T) {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 6, Owner: "b", Followers: []string{"c", "d", "e"}, Policy: "majority_durable"}
	proposal := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 7, Owner: "c", Followers: []string{"d", "f"}, Policy: "majority_durable"}
	starts := []wire.HistoryStart{{Epoch: 6, RecordTail: 40, CursorTail: 7, Node: "b"}, {Epoch: 2, RecordTail: 12, Node: "a"}}
	copies := []CopyTails{
		{Node: "b", Live: false, Published: true, RecordTail: 45, CursorTail: 9}, // the lost owner
		{Node: "c", Live: true, Published: true, RecordTail: 31, CursorTail: 5},
		{Node: "d", Live: true, Published: true, RecordTail: 38, CursorTail: 2},
		{Node: "e", Live: true, Published: false},
		{Node: "x", Live: true, Published: true, RecordTail: 99}, // holds no copy of old
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
			{Node: "e", Live: true, Published: true, RecordTail: 50, CursorTail: 3},
			{Node: "d", Live: true, Published: true, RecordTail: 50, CursorTail: 3},
			{Node: "c", Live: true, Published: true, RecordTail: 50, CursorTail: 2},
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
		at := []CopyTails{{Node: "c", Live: true, Published: true, RecordTail: 40}}
		_, _, below, err := AcceptLoss(old, proposal, starts, at, "c")
		if err != nil || below {
			t.Errorf("below %v err %v; want not below", below, err)
		}
	})
	t.Run("unnamed prefers a published copy", func(t *testing.T) {
		only := []CopyTails{{Node: "c", Live: true}, {Node: "e", Live: true, Published: true, RecordTail: 0}}
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
