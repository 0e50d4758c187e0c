package streamlog

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestCutReturningOwner is the seed's returning copy: an old owner with a
// longer suffix cuts to the new owner's start, with its cursor snapshot's
// boundary lowered and cursors clamped, then takes the new owner's entries.
func TestCutReturningOwner(t *testing.T) {
	dir := t.TempDir()
	small := func(s *impl) { s.snapEvery = 2 }
	s := openTest(t, dir, small)
	c := mustCreate(t, s, "s", 1)
	ctx := context.Background()
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	old := payloads("old", 0, 10)
	mustAppend(t, c, old)
	for _, e := range []struct {
		cursor string
		pos    uint64
	}{{"a", 2}, {"b", 5}, {"a", 8}, {"b", 10}} {
		if _, err := c.AppendCursor(e.cursor, e.pos); err != nil {
			t.Fatal(err)
		}
	}
	if tl := c.Tails(); tl.CursorHead != 4 || tl.CursorWritten != 4 {
		t.Fatalf("before the cut %+v, want a snapshot at 4", tl)
	}
	starts := []wire.HistoryStart{{Epoch: 1, Node: "n1"}, {Epoch: 2, RecordTail: 6, CursorTail: 3, Node: "n2"}}

	res, err := c.CutToHistory(2, starts)
	if err != nil {
		t.Fatal(err)
	}
	if res != (CutResult{Cut: true, RecordTail: 6, CursorTail: 3, Removed: 4}) {
		t.Fatalf("cut result %+v", res)
	}
	tl := c.Tails()
	if tl.Record != 6 || tl.CursorWritten != 3 || tl.CursorDurable != 3 || tl.CursorHead != 3 {
		t.Fatalf("tails after the cut %+v", tl)
	}
	if !equalData(dataOf(readAll(t, c)), old[:6]) {
		t.Fatal("records below the start changed")
	}
	if want := refDigest(0, 0, old[:6]); c.Digest() != want {
		t.Fatalf("digest %s after the cut, want the digest at 6 %s", c.Digest(), want)
	}
	// The snapshot (boundary 4, state a=8 b=10) kept its state with its
	// boundary lowered to 3; both cursors are above the new tail 6.
	for name, want := range map[string]uint64{"a": 6, "b": 6} {
		if p, _ := c.Cursor(name); p != want {
			t.Fatalf("cursor %s at %d, want %d", name, p, want)
		}
	}
	evs, err := c.ReadCursorEvents(0, 0, 100)
	if err != nil || len(evs) != 3 {
		t.Fatalf("cursor events after the cut: %v %+v", err, evs)
	}
	if got := c.LogEpochs(); !slices.Equal(got, []wire.LogEpoch{{Epoch: 1}}) {
		t.Fatalf("log epochs %+v", got)
	}

	// Repeating is harmless.
	res, err = c.CutToHistory(2, starts)
	if err != nil || res.Cut || res.RecordTail != 6 || res.CursorTail != 3 {
		t.Fatalf("repeated cut: %v %+v", err, res)
	}

	if err := c.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	if got := c.LogEpochs(); !slices.Equal(got, []wire.LogEpoch{{Epoch: 1}, {Epoch: 2, RecordStart: 6, CursorStart: 3}}) {
		t.Fatalf("log epochs %+v", got)
	}
	// Cutting again after the role change: the copy is on epoch 2 now.
	if res, err := c.CutToHistory(2, starts); err != nil || res.Cut {
		t.Fatalf("cut after BeginEpoch: %v %+v", err, res)
	}
	fresh := payloads("new", 6, 5)
	recs := make([]Record, len(fresh))
	for i, d := range fresh {
		recs[i] = Record{Offset: uint64(6 + i), Data: d}
	}
	if err := c.Apply(ctx, recs); err != nil {
		t.Fatalf("apply the new owner's records: %v", err)
	}
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{3, "b", 7}}); err != nil {
		t.Fatalf("apply the new owner's cursor event at the cut: %v", err)
	}
	if p, _ := c.Cursor("b"); p != 7 {
		t.Fatalf("cursor b at %d, want the new owner's 7", p)
	}
	want := append(slices.Clone(old[:6]), fresh...)
	digest := c.Digest()
	if digest != refDigest(0, 0, want) {
		t.Fatal("digest does not match the new history")
	}
	_ = s.Close()
	s2 := openTest(t, dir, small)
	c2 := s2.Get("s")
	if !equalData(dataOf(readAll(t, c2)), want) || c2.Digest() != digest {
		t.Fatal("log changed across reopen")
	}
	for name, want := range map[string]uint64{"a": 6, "b": 7} {
		if p, _ := c2.Cursor(name); p != want {
			t.Fatalf("cursor %s at %d after reopen, want %d", name, p, want)
		}
	}
}

func TestCutRules(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T, epochs ...uint64) (*Store, *Copy) {
		s := openTest(t, t.TempDir(), nil)
		c := mustCreate(t, s, "s", 1)
		for i, e := range epochs {
			if err := c.BeginEpoch(e); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, c, payloads("e", i*5, 5))
		}
		return s, c
	}
	t.Run("own epoch at or past target", func(t *testing.T) {
		_, c := setup(t, 1, 3)
		starts := []wire.HistoryStart{{Epoch: 2, RecordTail: 2}, {Epoch: 3, RecordTail: 5}}
		for _, target := range []uint64{2, 3} {
			res, err := c.CutToHistory(target, starts)
			if err != nil || res.Cut || res.RecordTail != 10 {
				t.Fatalf("target %d: %v %+v", target, err, res)
			}
		}
	})
	t.Run("no qualifying start", func(t *testing.T) {
		_, c := setup(t, 1)
		res, err := c.CutToHistory(4, []wire.HistoryStart{{Epoch: 1}, {Epoch: 5, RecordTail: 1}})
		if err != nil || res.Cut || c.Tails().Record != 5 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("lowest start wins", func(t *testing.T) {
		_, c := setup(t, 1)
		mustAppend(t, c, payloads("x", 5, 5))
		res, err := c.CutToHistory(4, []wire.HistoryStart{{Epoch: 2, RecordTail: 7}, {Epoch: 3, RecordTail: 4}, {Epoch: 5, RecordTail: 1}})
		if err != nil || !res.Cut || res.RecordTail != 4 || res.Removed != 6 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("each log at its own lowest start", func(t *testing.T) {
		// Epoch 2 started at records 4 / cursor events 5, epoch 3 at 6 / 2:
		// the record log is cut at 4 and the cursor event log at 2, not at
		// the cursor tail of the start with the lowest record tail.
		_, c := setup(t, 1)
		mustAppend(t, c, payloads("x", 5, 5))
		for i := range 6 {
			if _, err := c.AppendCursor("c", uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		starts := []wire.HistoryStart{{Epoch: 2, RecordTail: 4, CursorTail: 5}, {Epoch: 3, RecordTail: 6, CursorTail: 2}}
		res, err := c.CutToHistory(3, starts)
		if err != nil || !res.Cut || res.RecordTail != 4 || res.CursorTail != 2 {
			t.Fatalf("cut %v %+v, want records at 4 and cursor events at 2", err, res)
		}
		if tl := c.Tails(); tl.Record != 4 || tl.CursorWritten != 2 {
			t.Fatalf("tails after the cut %+v", tl)
		}
		if p, _ := c.Cursor("c"); p != 1 {
			t.Fatalf("cursor c at %d after the cut, want 1 (the fold of events 0 and 1)", p)
		}
	})
	t.Run("caught up follower keeps its records", func(t *testing.T) {
		// Followed epoch 2 from 5 and holds 10 records; epoch 3 starts at 10.
		_, c := setup(t, 1, 2)
		res, err := c.CutToHistory(3, []wire.HistoryStart{{Epoch: 2, RecordTail: 5}, {Epoch: 3, RecordTail: 10}})
		if err != nil || res.Cut || c.Tails().Record != 10 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("never below the head", func(t *testing.T) {
		s, c := setup(t, 1)
		mustAppend(t, c, payloads("e", 5, 5))
		if err := c.SetRetention(wire.Retention{MaxRecords: 2}); err != nil {
			t.Fatal(err)
		}
		if err := c.EnforceRetention(time.Now(), 100); err != nil {
			t.Fatal(err)
		}
		headDigest := refDigest(0, 0, payloads("e", 0, 8))
		res, err := c.CutToHistory(2, []wire.HistoryStart{{Epoch: 2, RecordTail: 3}})
		if err != nil || !res.Cut || res.RecordTail != 8 || res.Removed != 2 {
			t.Fatalf("%v %+v", err, res)
		}
		if tl := c.Tails(); tl.Head != 8 || tl.Record != 8 || c.Digest() != headDigest {
			t.Fatalf("tails %+v digest %s want %s", tl, c.Digest(), headDigest)
		}
		_ = s
	})
	t.Run("sealed copy uses the epochs its seal replaced", func(t *testing.T) {
		_, c := setup(t, 1)
		if _, err := c.Seal(2, 1); err != nil {
			t.Fatal(err)
		}
		// Epoch 2 started at 3 on another copy: the sealed copy (own epoch
		// 1) is cut there while still sealed, then released.
		res, err := c.CutToHistory(2, []wire.HistoryStart{{Epoch: 2, RecordTail: 3}})
		if err != nil || !res.Cut || res.RecordTail != 3 {
			t.Fatalf("%v %+v", err, res)
		}
		seal, ok := c.SealInfo()
		if !ok || !slices.Equal(seal.Replaced, []wire.LogEpoch{{Epoch: 1}}) {
			t.Fatalf("seal %v %+v", ok, seal)
		}
		if err := c.BeginEpoch(2); err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(ctx, []Record{{Offset: 3, Data: []byte("n")}}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("log epochs past the cut are lowered, not dropped", func(t *testing.T) {
		// This copy owned epoch 3 from 5; an accepted owner loss then
		// started epoch 4 at 4, below epoch 3's start.
		_, c := setup(t, 1, 3)
		starts := []wire.HistoryStart{{Epoch: 3, RecordTail: 5}, {Epoch: 4, RecordTail: 4}}
		res, err := c.CutToHistory(4, starts)
		if err != nil || !res.Cut || res.RecordTail != 4 || res.Removed != 6 {
			t.Fatalf("%v %+v", err, res)
		}
		if got := c.LogEpochs(); !slices.Equal(got, []wire.LogEpoch{{Epoch: 1}, {Epoch: 3, RecordStart: 4}}) || c.Epoch() != 3 {
			t.Fatalf("log epochs %+v after the cut", got)
		}
		// Were epoch 3 dropped, the copy's own epoch would fall to 1 and
		// this older start would cut it further.
		res, err = c.CutToHistory(4, append(starts, wire.HistoryStart{Epoch: 2, RecordTail: 1}))
		if err != nil || res.Cut || res.RecordTail != 4 {
			t.Fatalf("repeat with an older start listed: %v %+v", err, res)
		}
	})
}
