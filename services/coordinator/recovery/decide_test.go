package recovery

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

var now = time.UnixMilli(1_700_000_000_000)

// nodes returns n node ids n1..n<n>.
func nodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}

// pending builds a pending recovery of stream "s" whose old assignment at
// epoch 4 has the given copies (owner first) and policy.
func pending(policy string, copies ...string) wire.PendingRecovery {
	old := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 4, Owner: copies[0], Followers: copies[1:], Policy: policy}
	// The proposal keeps the surviving copies and adds nobody new.
	proposal := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: copies[len(copies)-1], Policy: policy}
	if len(copies) > 2 {
		proposal.Followers = copies[1 : len(copies)-1]
	}
	return wire.PendingRecovery{Stream: "s", Transition: 17, Old: old, Proposal: proposal, Reason: "expired"}
}

// ans is a valid seal answer for pr from node with the given tails.
func ans(pr wire.PendingRecovery, node string, rec, cur uint64) Answer {
	return Answer{Node: node, Reply: &wire.SealReply{
		Node: node, Stream: pr.Stream, FenceEpoch: pr.Old.Epoch + 1, Transition: pr.Transition,
		RecordTail: rec, CursorTail: cur,
	}}
}

func timedOut(node string) Answer {
	return Answer{Node: node, Err: fmt.Errorf("seal %s: %w", node, errors.New("context deadline exceeded")), Took: time.Second}
}

// TestSealThreshold checks, for every E = 1..7 and every policy, that
// exactly R = E - W + 1 answers promote and R - 1 wait with the right
// figures. W is written out here from the seed, independently of package
// policy, so a wrong R in either place fails.
func TestSealThreshold(t *testing.T) {
	for e := 1; e <= 7; e++ {
		want := map[string]int{ // stamp -> W
			"":                 e,
			"local_durable":    e,
			"majority_durable": e/2 + 1,
			"bogus":            e, // unreadable reads as every copy
		}
		for n := 1; n <= 8; n++ {
			want[fmt.Sprintf("replica_durable(%d)", n)] = min(n, e)
			want[fmt.Sprintf("replica_accepted(%d)", n)] = min(n, e)
		}
		for stamp, w := range want {
			r := e - w + 1
			ns := nodes(e)
			pr := pending(stamp, ns...)
			var all []Answer
			for i, n := range ns {
				// Tails grow along the copies, so the furthest is the last.
				all = append(all, ans(pr, n, uint64(100+i), 0))
			}
			name := fmt.Sprintf("E=%d/%s", e, stamp)

			d := Decide(pr, nil, all[:r], nil, now)
			if d.Kind != Promote {
				t.Errorf("%s: %d answers (R=%d): %s (%s), want promote", name, r, r, d.Kind, d.Reason)
			}
			d = Decide(pr, nil, all, nil, now)
			if d.Kind != Promote || d.Assignment.Owner != ns[e-1] {
				t.Errorf("%s: all answers: %s owner %q, want promote %s", name, d.Kind, d.Assignment.Owner, ns[e-1])
			}
			if r == 1 {
				continue
			}
			d = Decide(pr, nil, all[:r-1], nil, now)
			if d.Kind != WaitAnswers || d.Wait == nil {
				t.Fatalf("%s: %d answers (R=%d): %s, want wait_answers", name, r-1, r, d.Kind)
			}
			wantWait := wire.RecoveryWait{Kind: WaitKindAnswers, Answered: r - 1, Needed: r, Unanswered: ns[r-1:], AtMS: now.UnixMilli()}
			if !reflect.DeepEqual(*d.Wait, wantWait) {
				t.Errorf("%s: wait = %+v, want %+v", name, *d.Wait, wantWait)
			}
		}
	}
}

// TestNoAnswersIsWaitEvenWhenROne: with W = E, R = 1, but zero answers must
// still wait: nothing is promoted without a sealed copy.
func TestNoAnswersIsWaitEvenWhenROne(t *testing.T) {
	pr := pending("local_durable", "a", "b", "c")
	d := Decide(pr, nil, []Answer{timedOut("a"), timedOut("b"), timedOut("c")}, nil, now)
	if d.Kind != WaitAnswers || d.Wait.Needed != 1 || d.Wait.Answered != 0 || !slices.Equal(d.Wait.Unanswered, []string{"a", "b", "c"}) {
		t.Fatalf("got %s %+v, want wait for 1 of a,b,c", d.Kind, d.Wait)
	}
}

func TestLocalDurableAnySurvivorPromotes(t *testing.T) {
	pr := pending("local_durable", "a", "b", "c")
	for _, survivor := range []string{"b", "c"} {
		answers := []Answer{timedOut("a"), timedOut("b"), timedOut("c")}
		for i := range answers {
			if answers[i].Node == survivor {
				answers[i] = ans(pr, survivor, 3, 1)
			}
		}
		d := Decide(pr, nil, answers, nil, now)
		if d.Kind != Promote || d.Assignment.Owner != survivor {
			t.Errorf("survivor %s: %s owner %q (%s), want promote %s", survivor, d.Kind, d.Assignment.Owner, d.Reason, survivor)
		}
		if len(d.Assignment.Followers) != 0 {
			t.Errorf("survivor %s: followers %v; copies that did not answer must be left out", survivor, d.Assignment.Followers)
		}
	}
}

func TestMajorityOfThreeNeedsBothFollowers(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	d := Decide(pr, nil, []Answer{timedOut("a"), ans(pr, "b", 10, 2), timedOut("c")}, nil, now)
	if d.Kind != WaitAnswers || d.Wait.Answered != 1 || d.Wait.Needed != 2 || !slices.Equal(d.Wait.Unanswered, []string{"a", "c"}) {
		t.Fatalf("one follower: got %s %+v, want wait 1 of 2 needed, unanswered a,c", d.Kind, d.Wait)
	}
	d = Decide(pr, nil, []Answer{timedOut("a"), ans(pr, "b", 10, 2), ans(pr, "c", 12, 0)}, nil, now)
	if d.Kind != Promote || d.Assignment.Owner != "c" {
		t.Fatalf("both followers: got %s owner %q, want promote c (furthest record tail)", d.Kind, d.Assignment.Owner)
	}
}

func TestChooseFurthestAndTieBreaks(t *testing.T) {
	pr := pending("local_durable", "a", "b", "c", "d")
	cases := []struct {
		name    string
		tails   map[string][2]uint64
		leaving map[string]bool
		want    string
	}{
		{"highest record tail wins over cursor tail", map[string][2]uint64{"a": {5, 90}, "b": {7, 0}, "c": {6, 50}}, nil, "b"},
		{"record tie goes to highest cursor tail", map[string][2]uint64{"a": {7, 1}, "b": {7, 3}, "c": {7, 2}}, nil, "b"},
		{"full tie goes to lowest node id", map[string][2]uint64{"d": {7, 3}, "c": {7, 3}, "b": {7, 3}}, nil, "b"},
		{"lowest id is string order", map[string][2]uint64{"d": {7, 3}, "c": {7, 3}}, nil, "c"},
		{"leaving best yields to equal non-leaving", map[string][2]uint64{"a": {7, 3}, "b": {7, 3}, "c": {7, 3}}, map[string]bool{"a": true}, "b"},
		{"leaving preference skips several leaving", map[string][2]uint64{"a": {7, 3}, "b": {7, 3}, "c": {7, 3}}, map[string]bool{"a": true, "b": true}, "c"},
		{"leaving furthest stays when others are behind on record", map[string][2]uint64{"a": {8, 3}, "b": {7, 3}, "c": {7, 3}}, map[string]bool{"a": true}, "a"},
		{"leaving furthest stays when others are behind on cursor", map[string][2]uint64{"a": {7, 4}, "b": {7, 3}}, map[string]bool{"a": true}, "a"},
		{"all best leaving: lowest id among them", map[string][2]uint64{"b": {7, 3}, "a": {7, 3}, "c": {6, 9}}, map[string]bool{"a": true, "b": true}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var answers []Answer
			for _, n := range []string{"d", "c", "b", "a"} { // order must not matter
				if tl, ok := c.tails[n]; ok {
					answers = append(answers, ans(pr, n, tl[0], tl[1]))
				}
			}
			d := Decide(pr, nil, answers, c.leaving, now)
			if d.Kind != Promote || d.Assignment.Owner != c.want {
				t.Fatalf("got %s owner %q (%s), want promote %s", d.Kind, d.Assignment.Owner, d.Reason, c.want)
			}
			tl := c.tails[c.want]
			want := wire.HistoryStart{Epoch: 5, RecordTail: tl[0], CursorTail: tl[1], Node: c.want}
			if d.Start != want {
				t.Errorf("start = %+v, want %+v", d.Start, want)
			}
		})
	}
}

// TestInvalidAnswersDoNotCount: an answer that does not prove the copy is
// fenced for this recovery (another fence epoch, another transition, another
// node, an error, no reply, or a node that holds no copy) does not count
// toward R and cannot be chosen.
func TestInvalidAnswersDoNotCount(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	good := ans(pr, "b", 5, 0)
	mut := func(f func(*wire.SealReply)) Answer {
		a := ans(pr, "c", 99, 0)
		f(a.Reply)
		return a
	}
	bad := map[string]Answer{
		"older fence":      mut(func(r *wire.SealReply) { r.FenceEpoch = 4 }),
		"other transition": mut(func(r *wire.SealReply) { r.Transition = 16 }),
		"other node":       mut(func(r *wire.SealReply) { r.Node = "x" }),
		"error":            {Node: "c", Reply: ans(pr, "c", 99, 0).Reply, Err: errors.New("boom")},
		"nil reply":        {Node: "c"},
		"not a copy":       ans(pr, "z", 99, 0),
	}
	for name, b := range bad {
		d := Decide(pr, nil, []Answer{good, b}, nil, now)
		if d.Kind != WaitAnswers || d.Wait.Answered != 1 {
			t.Errorf("%s: got %s (%s), want wait with 1 answer", name, d.Kind, d.Reason)
		}
	}
	// A duplicate answer from the same node counts once.
	d := Decide(pr, nil, []Answer{good, good}, nil, now)
	if d.Kind != WaitAnswers || d.Wait.Answered != 1 {
		t.Errorf("duplicate: got %s, want wait with 1 answer", d.Kind)
	}
}

func TestNewAssignment(t *testing.T) {
	// Old: a (owner, lost), b, c, d. Proposal: owner e (new), followers b, f
	// (new), d. Copies b and d answer; c times out.
	pr := pending("majority_durable", "a", "b", "c", "d")
	pr.Proposal = wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: "e", Followers: []string{"b", "f", "d", "c"}, Policy: "replica_durable(2)"}
	answers := []Answer{timedOut("a"), ans(pr, "b", 20, 4), timedOut("c"), ans(pr, "d", 21, 1)}
	// E=4, majority W=3, R=2: two answers suffice.
	d := Decide(pr, []wire.HistoryStart{{Epoch: 2, RecordTail: 10, Node: "a"}}, answers, nil, now)
	if d.Kind != Promote {
		t.Fatalf("got %s (%s), want promote", d.Kind, d.Reason)
	}
	want := wire.Assignment{Stream: "s", StreamID: 9, Epoch: 5, Owner: "d", Followers: []string{"b", "e", "f"}, Policy: "replica_durable(2)"}
	if !reflect.DeepEqual(d.Assignment, want) {
		t.Errorf("assignment = %+v\nwant         %+v", d.Assignment, want)
	}
	if wantStart := (wire.HistoryStart{Epoch: 5, RecordTail: 21, CursorTail: 1, Node: "d"}); d.Start != wantStart {
		t.Errorf("start = %+v, want %+v", d.Start, wantStart)
	}
	if d.Reason == "" || d.Wait != nil {
		t.Errorf("reason %q, wait %+v: want a reason and no wait", d.Reason, d.Wait)
	}
}

// TestConfirmedPrefix is the seed's second owner loss: a failover at epoch 5
// made b owner at record tail 40; b is lost before its followers caught up.
// The survivors are below 40, so recovery waits, with the attention figures;
// once a copy at or past the start answers, it promotes.
func TestConfirmedPrefix(t *testing.T) {
	pr := pending("majority_durable", "b", "c", "d")
	pr.Old.Epoch = 5
	starts := []wire.HistoryStart{
		{Epoch: 5, RecordTail: 40, CursorTail: 7, Node: "b"},
		{Epoch: 2, RecordTail: 12, CursorTail: 1, Node: "a"},
	}
	ans6 := func(node string, rec, cur uint64) Answer {
		a := ans(pr, node, rec, cur)
		a.Reply.FenceEpoch = 6
		return a
	}
	d := Decide(pr, starts, []Answer{timedOut("b"), ans6("c", 31, 5), ans6("d", 38, 2)}, nil, now)
	if d.Kind != WaitPrefix || d.Wait == nil {
		t.Fatalf("got %s (%s), want wait_confirmed_prefix", d.Kind, d.Reason)
	}
	w := *d.Wait
	if w.Kind != WaitKindPrefix || w.Start == nil || *w.Start != starts[0] || w.BestTail != 38 || w.BestNode != "d" || w.AtMS != now.UnixMilli() {
		t.Errorf("wait = %+v (start %+v); want confirmed_prefix, start %+v, best 38 on d", w, w.Start, starts[0])
	}
	if w.Answered != 2 || w.Needed != 2 || !slices.Equal(w.Unanswered, []string{"b"}) {
		t.Errorf("wait answers = %d/%d %v, want 2/2 [b]", w.Answered, w.Needed, w.Unanswered)
	}
	// Exactly at the start is enough.
	d = Decide(pr, starts, []Answer{timedOut("b"), ans6("c", 40, 0), ans6("d", 38, 2)}, nil, now)
	if d.Kind != Promote || d.Assignment.Owner != "c" || d.Start.RecordTail != 40 || d.Assignment.Epoch != 6 {
		t.Fatalf("copy at the start: got %s owner %q start %+v, want promote c at 40, epoch 6", d.Kind, d.Assignment.Owner, d.Start)
	}
	// The old owner coming back past its start.
	d = Decide(pr, starts, []Answer{ans6("b", 44, 9), ans6("c", 31, 5), timedOut("d")}, nil, now)
	if d.Kind != Promote || d.Assignment.Owner != "b" || d.Start.RecordTail < starts[0].RecordTail {
		t.Fatalf("owner back: got %s owner %q start %+v, want promote b at 44", d.Kind, d.Assignment.Owner, d.Start)
	}
	// The latest start is the highest epoch, wherever it is in the list.
	d = Decide(pr, []wire.HistoryStart{starts[0], {Epoch: 1, RecordTail: 100}}, []Answer{ans6("c", 41, 0), ans6("d", 38, 2)}, nil, now)
	if d.Kind != Promote {
		t.Errorf("an older start with a higher tail must not count: got %s (%s)", d.Kind, d.Reason)
	}
}

// TestPromotedTailsOnlyGrow checks invariant 5 over many random-ish answer
// sets: whenever Decide promotes, the start it records is at least the latest
// start, and it is the maximal record tail among valid answers.
func TestPromotedTailsOnlyGrow(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c", "d", "e")
	starts := []wire.HistoryStart{{Epoch: 3, RecordTail: 50, Node: "x"}}
	seed := uint64(1)
	next := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	promoted := 0
	for range 2000 {
		var answers []Answer
		maxTail := uint64(0)
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			if next()%3 == 0 {
				answers = append(answers, timedOut(n))
				continue
			}
			rec := 40 + next()%20
			answers = append(answers, ans(pr, n, rec, next()%5))
			maxTail = max(maxTail, rec)
		}
		leaving := map[string]bool{"a": next()%2 == 0}
		d := Decide(pr, starts, answers, leaving, now)
		if d.Kind == Promote {
			promoted++
			if d.Start.RecordTail < starts[0].RecordTail || d.Start.RecordTail != maxTail {
				t.Fatalf("promoted %+v with answers %+v: below the start or not the furthest (%d)", d.Start, answers, maxTail)
			}
		}
	}
	if promoted == 0 {
		t.Fatal("no case promoted; the test checks nothing")
	}
}

// TestStaleHistoryCopyRankedAtItsCut is the seed's known limit of a copy
// whose host did not apply its last role change before the seal. Epoch 5's
// owner b started at record 40 and confirmed 40..44 on b and d (W=2 of 3).
// c still follows epoch 4's history and holds that owner's unconfirmed suffix
// up to 50. Ranked by its raw tail, c would be promoted and its host would
// cut itself to 40 on the role change, losing confirmed 40..44 while the
// recorded start claimed 50. Ranked at its cut (40), d is chosen.
func TestStaleHistoryCopyRankedAtItsCut(t *testing.T) {
	starts := []wire.HistoryStart{{Epoch: 2, RecordTail: 12, CursorTail: 1, Node: "a"}, {Epoch: 5, RecordTail: 40, CursorTail: 7, Node: "b"}}
	withEpochs := func(a Answer, epochs ...wire.LogEpoch) Answer {
		a.Reply.FenceEpoch = 6
		a.Reply.LogEpochs = epochs
		return a
	}
	pr := pending("majority_durable", "b", "c", "d")
	pr.Old.Epoch = 5
	stale := []wire.LogEpoch{{Epoch: 2, RecordStart: 12, CursorStart: 1}, {Epoch: 4, RecordStart: 30, CursorStart: 5}}
	current := []wire.LogEpoch{{Epoch: 2, RecordStart: 12, CursorStart: 1}, {Epoch: 5, RecordStart: 40, CursorStart: 7}}
	c := withEpochs(ans(pr, "c", 50, 9), stale...)
	d := withEpochs(ans(pr, "d", 45, 8), current...)

	dec := Decide(pr, starts, []Answer{timedOut("b"), c, d}, nil, now)
	if dec.Kind != Promote || dec.Assignment.Owner != "d" || dec.Start != (wire.HistoryStart{Epoch: 6, RecordTail: 45, CursorTail: 8, Node: "d"}) {
		t.Fatalf("got %s owner %q start %+v (%s); want d promoted at 45/8", dec.Kind, dec.Assignment.Owner, dec.Start, dec.Reason)
	}
	if !slices.Equal(dec.Assignment.Followers, []string{"c"}) {
		t.Errorf("followers %v, want [c] (it is cut and catches up)", dec.Assignment.Followers)
	}

	// A seal that advanced the copy's epochs to the fence does not hide its
	// own history: the epochs at or below the old epoch decide.
	cFenced := withEpochs(ans(pr, "c", 50, 9), append(slices.Clone(stale), wire.LogEpoch{Epoch: 6, RecordStart: 50, CursorStart: 9})...)
	if dec := Decide(pr, starts, []Answer{cFenced, d}, nil, now); dec.Assignment.Owner != "d" {
		t.Errorf("fence epoch entry: owner %q, want d", dec.Assignment.Owner)
	}

	// With only the stale copy (W = E, R = 1), it is promoted at its cut,
	// which is where its host will start.
	prAll := pr
	prAll.Old.Policy = "local_durable"
	dec = Decide(prAll, starts, []Answer{timedOut("b"), c, timedOut("d")}, nil, now)
	if dec.Kind != Promote || dec.Start != (wire.HistoryStart{Epoch: 6, RecordTail: 40, CursorTail: 7, Node: "c"}) {
		t.Errorf("stale copy alone: %s start %+v, want promote at its cut 40/7", dec.Kind, dec.Start)
	}

	// Two starts after the copy's epoch: the lowest is the cut, and being
	// below the latest start it waits for the confirmed prefix.
	starts3 := []wire.HistoryStart{{Epoch: 3, RecordTail: 30, CursorTail: 4, Node: "x"}, starts[1]}
	c2 := withEpochs(ans(prAll, "c", 50, 9), wire.LogEpoch{Epoch: 2, RecordStart: 0})
	dec = Decide(prAll, starts3, []Answer{c2}, nil, now)
	if dec.Kind != WaitPrefix || dec.Wait.BestTail != 30 || dec.Wait.BestNode != "c" {
		t.Errorf("cut below the latest start: %s %+v, want wait_confirmed_prefix with best 30 on c", dec.Kind, dec.Wait)
	}

	// Without log epochs the reported tails are taken as they are.
	raw := withEpochs(ans(prAll, "c", 50, 9))
	if dec := Decide(prAll, starts, []Answer{raw}, nil, now); dec.Start.RecordTail != 50 {
		t.Errorf("no log epochs: start %+v, want the reported 50", dec.Start)
	}
	// A copy on the current history is never lowered, however far ahead.
	ahead := withEpochs(ans(prAll, "d", 90, 20), current...)
	if dec := Decide(prAll, starts, []Answer{ahead}, nil, now); dec.Start.RecordTail != 90 || dec.Start.CursorTail != 20 {
		t.Errorf("current history: start %+v, want 90/20", dec.Start)
	}
}

// TestHistoryTailsCutsEachLogAtItsOwnMinimum: the record tail comes down to
// the lowest record tail and the cursor tail to the lowest cursor tail of
// the qualifying starts, each on its own, as the host's storage cuts. Cursor
// tails need not grow along the starts, so taking the cursor tail of the
// start with the lowest record tail would rank (and record) a copy above
// the cursor log its host keeps.
func TestHistoryTailsCutsEachLogAtItsOwnMinimum(t *testing.T) {
	starts := []wire.HistoryStart{
		{Epoch: 2, RecordTail: 10, CursorTail: 1, Node: "a"}, // at or below the copy's own epoch: never a cut
		{Epoch: 3, RecordTail: 45, CursorTail: 2, Node: "x"},
		{Epoch: 5, RecordTail: 40, CursorTail: 9, Node: "b"}, // an accepted loss below the prefix may record a lower start
		{Epoch: 7, RecordTail: 1, CursorTail: 0, Node: "y"},  // after the fence epoch: not yet a cut
	}
	reply := func(rec, cur uint64, epochs ...uint64) *wire.SealReply {
		r := &wire.SealReply{RecordTail: rec, CursorTail: cur}
		for _, e := range epochs {
			r.LogEpochs = append(r.LogEpochs, wire.LogEpoch{Epoch: e})
		}
		return r
	}
	for _, c := range []struct {
		name     string
		r        *wire.SealReply
		rec, cur uint64
		cut      bool
	}{
		{"stale copy: each log at its own minimum", reply(50, 12, 1, 2), 40, 2, true},
		{"only the cursor log is cut", reply(40, 12, 2), 40, 2, true},
		{"below every cut: unchanged", reply(30, 1, 2), 30, 1, false},
		{"on the latest history: unchanged", reply(90, 20, 2, 5), 90, 20, false},
		{"fence entry ignored", reply(50, 12, 2, 6), 40, 2, true},
		{"no log epochs: as reported", reply(50, 12), 50, 12, false},
	} {
		rec, cur, cut := historyTails(c.r, starts, 5)
		if rec != c.rec || cur != c.cur || cut != c.cut {
			t.Errorf("%s: got %d/%d cut %v, want %d/%d cut %v", c.name, rec, cur, cut, c.rec, c.cur, c.cut)
		}
	}

	// Through Decide: the stale copy alone (W = E, R = 1) is promoted at
	// 40/2, the tails its host keeps, not at 40/9.
	pr := pending("local_durable", "b", "c")
	pr.Old.Epoch = 5
	a := ans(pr, "c", 50, 12)
	a.Reply.FenceEpoch = 6
	a.Reply.LogEpochs = []wire.LogEpoch{{Epoch: 2, RecordStart: 10, CursorStart: 1}}
	d := Decide(pr, starts, []Answer{timedOut("b"), a}, nil, now)
	if want := (wire.HistoryStart{Epoch: 6, RecordTail: 40, CursorTail: 2, Node: "c"}); d.Kind != Promote || d.Start != want {
		t.Fatalf("got %s start %+v (%s), want promote with start %+v", d.Kind, d.Start, d.Reason, want)
	}
}

// TestLeavingOwnerHandsOverWhenNothingConfirmedBeyond: the old owner leaves
// gracefully, its copy strictly furthest, and reports in its seal answer the
// bound of what it confirmed. A copy on a node that is not leaving whose
// record tail reaches that bound and the latest start holds every confirmed
// record and is promoted (the furthest such copy), so a leaving owner, which
// applies no new assignment, is not promoted. When the leaving owner holds
// confirmed records past every other copy, when it reports no bound, when
// the bound comes from a copy that is not the old owner, or when the latest
// start is past the other copies, the rule is as before: the leaving owner is
// promoted (or the recovery waits for the confirmed prefix).
func TestLeavingOwnerHandsOverWhenNothingConfirmedBeyond(t *testing.T) {
	pr := pending("majority_durable", "a", "b", "c")
	leavingA := map[string]bool{"a": true}
	withBound := func(a Answer, confirmed uint64) Answer {
		a.Reply.Confirmed = confirmed
		return a
	}
	start := func(epoch, rec uint64, node string) wire.HistoryStart {
		return wire.HistoryStart{Epoch: epoch, RecordTail: rec, Node: node}
	}
	cases := []struct {
		name    string
		starts  []wire.HistoryStart
		answers []Answer
		leaving map[string]bool
		kind    string
		want    string // owner for promote
	}{
		{"bound at a lagging follower's tail: the follower", []wire.HistoryStart{start(4, 100, "a")},
			[]Answer{withBound(ans(pr, "a", 305, 9), 301), ans(pr, "c", 301, 0)}, leavingA, Promote, "c"},
		{"bound below both followers: the furthest of them", nil,
			[]Answer{withBound(ans(pr, "a", 305, 9), 250), ans(pr, "b", 280, 0), ans(pr, "c", 301, 0)}, leavingA, Promote, "c"},
		{"only the follower at the bound qualifies", nil,
			[]Answer{withBound(ans(pr, "a", 305, 9), 290), ans(pr, "b", 280, 5), ans(pr, "c", 295, 0)}, leavingA, Promote, "c"},
		{"leaving owner holds confirmed records past every other copy", nil,
			[]Answer{withBound(ans(pr, "a", 305, 9), 303), ans(pr, "c", 301, 0)}, leavingA, Promote, "a"},
		{"no bound reported: as before", nil,
			[]Answer{ans(pr, "a", 305, 9), ans(pr, "c", 301, 0)}, leavingA, Promote, "a"},
		{"a bound from a copy that is not the old owner does not count", nil,
			[]Answer{ans(pr, "a", 305, 9), withBound(ans(pr, "c", 301, 0), 1)}, leavingA, Promote, "a"},
		{"owner not leaving: the furthest, as before", nil,
			[]Answer{withBound(ans(pr, "a", 305, 9), 301), ans(pr, "c", 301, 0)}, nil, Promote, "a"},
		{"latest start past the follower: the leaving owner", []wire.HistoryStart{start(4, 303, "a")},
			[]Answer{withBound(ans(pr, "a", 305, 9), 250), ans(pr, "c", 301, 0)}, leavingA, Promote, "a"},
		{"a leaving follower at the bound does not take over", nil,
			[]Answer{withBound(ans(pr, "a", 305, 9), 250), ans(pr, "c", 301, 0)}, map[string]bool{"a": true, "c": true}, Promote, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(pr, c.starts, c.answers, c.leaving, now)
			if d.Kind != c.kind || (c.kind == Promote && d.Assignment.Owner != c.want) {
				t.Fatalf("got %s owner %q (%s), want %s %s", d.Kind, d.Assignment.Owner, d.Reason, c.kind, c.want)
			}
			var tails Answer
			for _, a := range c.answers {
				if a.Node == c.want {
					tails = a
				}
			}
			want := wire.HistoryStart{Epoch: 5, RecordTail: tails.Reply.RecordTail, CursorTail: tails.Reply.CursorTail, Node: c.want}
			if d.Start != want {
				t.Errorf("start = %+v, want %+v", d.Start, want)
			}
			// The leaving owner's copy stays in the assignment as a follower,
			// cut to the new start when it applies it.
			if c.want != "a" && !slices.Contains(d.Assignment.Followers, "a") {
				t.Errorf("followers %v do not keep the sealed leaving owner", d.Assignment.Followers)
			}
			if c.want != "a" && d.Start.RecordTail < c.answers[0].Reply.Confirmed {
				t.Errorf("promoted below the leaving owner's confirmed bound: start %d, bound %d", d.Start.RecordTail, c.answers[0].Reply.Confirmed)
			}
		})
	}

	// Waiting for the confirmed prefix is unchanged: the latest start is past
	// every copy that is not leaving, and the leaving owner did not answer.
	d := Decide(pr, []wire.HistoryStart{start(4, 303, "a")}, []Answer{ans(pr, "b", 280, 0), ans(pr, "c", 301, 0)}, leavingA, now)
	if d.Kind != WaitPrefix {
		t.Fatalf("got %s (%s), want %s", d.Kind, d.Reason, WaitPrefix)
	}
}
