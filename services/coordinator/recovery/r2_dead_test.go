package recovery

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// bDiesAfterRound1 is a recovery of copies a..e (majority_durable: W=3,
// R=3) in which a is dead, b answers its first seal with record tail bTail
// and then dies (no responders), and c, d, e hold 10.
func bDiesAfterRound1(bTail uint64) (*fakeState, *fakeSealer) {
	pr := pending("majority_durable", "a", "b", "c", "d", "e")
	se := newSealer(map[string][2]uint64{"b": {bTail, 0}, "c": {10, 0}, "d": {10, 0}, "e": {10, 0}})
	se.act["a"] = noResponders
	se.act["b"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call == 1 {
			return se.reply("b", req), nil
		}
		return noResponders(ctx, req, call) // b died after round 1
	}
	return &fakeState{pr: &pr, version: 3}, se
}

// R2: b answers round 1 with the furthest tail, then its host dies (no
// restart, so no new incarnation; the state even counts it gone). Later
// rounds never ask b again: the commit promotes the dead b.
func TestR2KeptAnswerPromotesDeadNode(t *testing.T) {
	st, se := bDiesAfterRound1(12)
	for _, n := range []string{"d", "e"} {
		se.act[n] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
			if call == 1 {
				return nil, errors.New("overloaded")
			}
			return se.reply(n, req), nil
		}
	}
	w := newWorker(st, se, &sleeps{})
	w.Incarnation = func(string) (uint64, bool) { return 1, true } // no restart seen: b is dead, not back
	w.Gone = func(n string) bool { return n == "a" || n == "b" }
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("b sealed %d times; applied %+v", len(se.calls("b")), st.applied)
	if len(st.applied) == 1 && st.applied[0].a.Owner == "b" {
		t.Errorf("promoted b, dead and gone since round 1, at record tail %d (only b holds 11..12, unconfirmed)", st.applied[0].start.RecordTail)
	}
}

// TestKeptAnswerOfADeadNodeNotYetGone: as R2's case, but b's host died
// within its TTL: the state does not count it gone yet, so its kept answer
// still counts. The worker must still not promote b on that answer: the
// chosen copy is sealed again before the commit, b does not answer, and c
// is promoted at 10 (11..12, only on a and b, were never confirmed), as
// when every round sealed every copy.
func TestKeptAnswerOfADeadNodeNotYetGone(t *testing.T) {
	st, se := bDiesAfterRound1(12)
	answersAfter(se, "d", 1)
	answersAfter(se, "e", 1)
	w := newWorker(st, se, &sleeps{})
	w.Incarnation = func(string) (uint64, bool) { return 1, true }
	w.Gone = func(n string) bool { return n == "a" } // b not expired yet
	if err := w.Run(testCtx(t), "s"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(st.applied) != 1 || st.applied[0].a.Owner == "b" || st.applied[0].start.RecordTail != 10 {
		t.Errorf("applied %+v; want one commit promoting a live copy at 10, not b (dead since round 1)", st.applied)
	}
	if n := len(se.calls("b")); n != 2 {
		t.Errorf("b sealed %d times, want 2 (round 1, and again as the chosen copy)", n)
	}
}

// TestKeptAnswerDroppedWhenItsNodeGoesMidRound: a node that goes gone while
// a round seals the others has its kept answer dropped before the round
// decides (not only at the next round's start): with it, the round would
// have had R answers and made the gone b a follower.
func TestKeptAnswerDroppedWhenItsNodeGoesMidRound(t *testing.T) {
	st, se := bDiesAfterRound1(9)
	var mu sync.Mutex
	bGone := false
	se.act["c"] = func(ctx context.Context, req wire.SealRequest, call int) (*wire.SealReply, error) {
		if call == 1 {
			return nil, errors.New("overloaded")
		}
		mu.Lock()
		bGone = true // b expires while round 2 seals c
		mu.Unlock()
		return se.reply("c", req), nil
	}
	answersAfter(se, "d", 1)
	se.act["e"] = noResponders
	w := newWorker(st, se, &sleeps{})
	w.Incarnation = func(string) (uint64, bool) { return 1, true }
	w.Gone = func(n string) bool {
		mu.Lock()
		defer mu.Unlock()
		return n == "a" || n == "e" || (n == "b" && bGone)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	_ = w.Run(ctx, "s") // c, d only: it waits for a third answer until ctx ends
	for _, c := range st.applied {
		if slices.Contains(c.a.Followers, "b") || c.a.Owner == "b" {
			t.Errorf("committed %+v with b, gone before the round decided", c.a)
		}
	}
}
