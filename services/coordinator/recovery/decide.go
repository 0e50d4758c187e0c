package recovery

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// sealed is one copy whose seal answer counts toward R, with its tails on
// the current history (see historyTails).
type sealed struct {
	node       string
	recordTail uint64
	cursorTail uint64
	// rawRecord is the record tail the copy reported, when the cut lowered it.
	rawRecord uint64
	cut       bool
	// confirmed is the bound the copy reported of what it confirmed as
	// the owner of the sealed epoch (wire.SealReply.Confirmed), 0 if none.
	confirmed uint64
}

// historyTails returns the tails a sealed copy has on the stream's current
// history: the tails it reported, lowered to the cut its host makes before
// any role change at a new epoch (seed, "Copies with a longer tail"; see
// lowerToCut), up to the fence epoch. The copy's own epoch is the highest of
// its log epochs at or below the old assignment's epoch (a seal may have
// advanced them to the fence without new data).
//
// For a copy whose host applied its last role change this is its reported
// tail, so the seed's rule is unchanged. It matters for the known limit of a
// copy whose host did not apply its last role change before the seal: its
// raw tail can hold an older owner's unconfirmed suffix past a later start.
// Ranked by that raw tail it could win over a copy holding records confirmed
// under the later owner, and its host would then cut itself to the start
// while the recorded start claimed the raw tail. A reply without log epochs
// is taken as it is.
func historyTails(r *wire.SealReply, starts []wire.HistoryStart, oldEpoch uint64) (rec, cur uint64, cut bool) {
	own, known := uint64(0), false
	for _, le := range r.LogEpochs {
		if le.Epoch <= oldEpoch && (!known || le.Epoch > own) {
			own, known = le.Epoch, true
		}
	}
	if !known {
		return r.RecordTail, r.CursorTail, false
	}
	rec, cur = lowerToCut(r.RecordTail, r.CursorTail, own, oldEpoch+1, starts)
	return rec, cur, rec != r.RecordTail || cur != r.CursorTail
}

// lowerToCut returns a copy's tails lowered to the cut its host makes before
// a role change at epoch target, given the copy's own epoch: the history
// starts recorded for an epoch after own and up to target qualify, and the
// record tail comes down to the lowest record tail among them and the cursor
// tail to the lowest cursor tail among them, each on its own. Cursor event
// tails need not grow along the starts (a promoted copy may hold fewer
// cursor commits than the owner before it), so the lowest cursor tail can
// belong to another start than the lowest record tail; the host's storage
// cuts each log at its own minimum, and ranking must agree with it. With no
// qualifying start the tails are returned as they are.
func lowerToCut(rec, cur, own, target uint64, starts []wire.HistoryStart) (uint64, uint64) {
	for _, s := range starts {
		if s.Epoch > own && s.Epoch <= target {
			rec, cur = min(rec, s.RecordTail), min(cur, s.CursorTail)
		}
	}
	return rec, cur
}

// confirmedBound returns an offset below which every confirmed record of
// the stream lies, as the seal answers prove it, and whether they do: the
// old owner's answer reports Confirmed, its bound of every offset it
// confirmed at the sealed epoch (final: its role stopped before it
// replied), and records confirmed at earlier epochs lie below the latest
// history start. The bound is the higher of the two. With no Confirmed
// from the old owner nothing is known.
func confirmedBound(got []sealed, oldOwner string, starts []wire.HistoryStart) (uint64, bool) {
	for _, s := range got {
		if s.node == oldOwner && s.confirmed > 0 {
			b := s.confirmed
			if latest := latestStart(starts); latest != nil {
				b = max(b, latest.RecordTail)
			}
			return b, true
		}
	}
	return 0, false
}

// furthest orders copies best first: highest record tail, then highest cursor
// event tail, then lowest node id, so the choice is deterministic (seed,
// failover step 2).
func furthest(a, b sealed) int {
	if c := cmp.Compare(b.recordTail, a.recordTail); c != 0 {
		return c
	}
	if c := cmp.Compare(b.cursorTail, a.cursorTail); c != 0 {
		return c
	}
	return cmp.Compare(a.node, b.node)
}

// copyNodes returns the distinct nodes of an assignment, owner first.
func copyNodes(a wire.Assignment) []string {
	var out []string
	for _, n := range a.Copies() {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// latestStart returns the history start with the highest epoch (the last of
// equal epochs), or nil when the stream has none.
func latestStart(starts []wire.HistoryStart) *wire.HistoryStart {
	var latest *wire.HistoryStart
	for i := range starts {
		if latest == nil || starts[i].Epoch >= latest.Epoch {
			s := starts[i]
			latest = &s
		}
	}
	return latest
}

// sealThreshold is R for the old assignment: the number of seal answers a
// promotion needs. It comes from package policy, the same rule the host
// confirms by, and from nowhere else.
func sealThreshold(old wire.Assignment) int {
	return policy.StampR(old.Policy, len(old.Copies()))
}

// validAnswer reports why an answer does not count toward R, or nil if it
// does. A reply for another fence epoch or transition does not prove that the
// copy's tail is fenced for this recovery, so it is not counted.
func validAnswer(a Answer, fence, transition uint64) error {
	if a.Err != nil {
		return a.Err
	}
	if a.Reply == nil {
		return errors.New("no reply")
	}
	r := a.Reply
	if r.Node != "" && r.Node != a.Node {
		return fmt.Errorf("reply names node %q", r.Node)
	}
	if r.FenceEpoch != fence {
		return fmt.Errorf("reply fenced at epoch %d, want %d", r.FenceEpoch, fence)
	}
	if r.Transition != transition {
		return fmt.Errorf("reply for transition %d, want %d", r.Transition, transition)
	}
	return nil
}

// newAssignment builds the assignment that promotes owner: the epoch after
// old's, the other sealed copies (in old's order) and the proposal's members
// that held no copy of old as followers, and the proposal's policy stamp.
func newAssignment(old, proposal wire.Assignment, owner string, others []string) wire.Assignment {
	a := wire.Assignment{
		Stream:    old.Stream,
		StreamID:  old.StreamID,
		Epoch:     old.Epoch + 1,
		Owner:     owner,
		Followers: []string{},
		Policy:    proposal.Policy,
	}
	held := copyNodes(old)
	for _, n := range held {
		if n != owner && slices.Contains(others, n) {
			a.Followers = append(a.Followers, n)
		}
	}
	for _, n := range copyNodes(proposal) {
		if !slices.Contains(held, n) && n != owner && !slices.Contains(a.Followers, n) {
			a.Followers = append(a.Followers, n)
		}
	}
	return a
}

// Decide is pure: given the pending recovery, the stream's history starts
// (read at the same state version the commit will be guarded on), the seal
// answers, the set of nodes that are leaving (draining or left), and now, it
// decides whether to promote a copy or to wait.
//
// R comes from policy.StampR on the old assignment's stamp and copy count, the
// same function the host confirms by. With fewer than R valid answers it
// waits for answers. Otherwise it chooses the furthest answered copy (record
// tail, then cursor event tail, then lowest node id), preferring a copy on a
// node that is not leaving among those with exactly the best tails, so a drain
// does not re-promote the leaving node while the promoted tails stay maximal.
// A copy on a node that is not leaving is preferred also when its record tail
// is at or past the confirmed bound the answers prove (confirmedBound: the old
// owner's reported Confirmed and the latest start): it holds every confirmed
// record, and what the leaving copies hold beyond it was never confirmed, so
// a graceful leave does not promote the leaving node, which applies no new
// assignment. The furthest such copy is chosen.
// If the chosen record tail is below the latest history start (the start of
// the highest epoch) it waits for the confirmed prefix; otherwise it promotes.
//
// An answer counts only if it is for this recovery's fence epoch and
// transition, from a node that holds a copy of the old assignment. Tails are
// ranked as they stand on the current history (historyTails): for every copy
// whose host applied its last role change that is the reported tail.
func Decide(pr wire.PendingRecovery, starts []wire.HistoryStart, answers []Answer, leaving map[string]bool, now time.Time) Decision {
	fence := pr.Old.Epoch + 1
	e := len(pr.Old.Copies())
	r := sealThreshold(pr.Old)

	nodes := copyNodes(pr.Old)
	var got []sealed
	var unanswered []string
	for _, n := range nodes {
		// The first valid answer for a node counts; answers from nodes that
		// hold no copy of the old assignment never do.
		var s *sealed
		for _, a := range answers {
			if a.Node == n && validAnswer(a, fence, pr.Transition) == nil {
				rec, cur, cut := historyTails(a.Reply, starts, pr.Old.Epoch)
				s = &sealed{node: n, recordTail: rec, cursorTail: cur, rawRecord: a.Reply.RecordTail, cut: cut, confirmed: a.Reply.Confirmed}
				break
			}
		}
		if s == nil {
			unanswered = append(unanswered, n)
			continue
		}
		got = append(got, *s)
	}
	at := now.UnixMilli()

	if len(got) < r {
		return Decision{
			Kind: WaitAnswers,
			Wait: &wire.RecoveryWait{
				Kind:       WaitKindAnswers,
				Answered:   len(got),
				Needed:     r,
				Unanswered: unanswered,
				AtMS:       at,
			},
			Reason: fmt.Sprintf("%d of %d copies answered the seal at epoch %d, %d needed (R = E - W + 1 for E=%d, policy %q); waiting for %v",
				len(got), len(nodes), fence, r, e, pr.Old.Policy, unanswered),
		}
	}

	slices.SortFunc(got, furthest)
	best := got[0]
	chosen := best
	preferred, belowBest := false, false
	bound, known := confirmedBound(got, pr.Old.Owner, starts)
	for _, s := range got {
		equal := s.recordTail == best.recordTail && s.cursorTail == best.cursorTail
		holds := known && s.recordTail >= bound
		if !equal && !holds {
			break // sorted: no later copy has the best tails or reaches the bound
		}
		if !leaving[s.node] {
			chosen = s
			preferred, belowBest = s.node != best.node, !equal
			break
		}
	}
	// A planned move promotes its target when the target is among the
	// furthest (move.go); otherwise the choice above stands.
	moved := false
	if t, ok := plannedTarget(pr, got, best, leaving); ok {
		chosen, preferred, belowBest, moved = t, false, false, true
	}

	if latest := latestStart(starts); latest != nil && chosen.recordTail < latest.RecordTail {
		return Decision{
			Kind: WaitPrefix,
			Wait: &wire.RecoveryWait{
				Kind:       WaitKindPrefix,
				Answered:   len(got),
				Needed:     r,
				Unanswered: unanswered,
				Start:      latest,
				BestTail:   chosen.recordTail,
				BestNode:   chosen.node,
				AtMS:       at,
			},
			Reason: fmt.Sprintf("furthest sealed copy %s has record tail %d, below the confirmed prefix %d that %s started at epoch %d; waiting for a copy at or past it",
				chosen.node, chosen.recordTail, latest.RecordTail, latest.Node, latest.Epoch),
		}
	}

	var others []string
	for _, s := range got {
		if s.node != chosen.node {
			others = append(others, s.node)
		}
	}
	a := newAssignment(pr.Old, pr.Proposal, chosen.node, others)
	if a.Stream == "" {
		a.Stream = pr.Stream
	}
	why := "furthest record tail"
	switch {
	case len(got) > 1 && got[1].recordTail == best.recordTail && got[1].cursorTail != best.cursorTail:
		why = "furthest record tail, tie broken by cursor event tail"
	case len(got) > 1 && got[1].recordTail == best.recordTail && got[1].cursorTail == best.cursorTail:
		why = "furthest tails, tie broken by lowest node id"
	}
	if preferred {
		why = fmt.Sprintf("furthest tails, %s preferred over leaving %s", chosen.node, best.node)
	}
	if belowBest {
		why = fmt.Sprintf("%s preferred over leaving %s (record tail %d): it holds every confirmed record, the old owner %s confirmed nothing at or past %d and the latest start is at most that",
			chosen.node, best.node, best.recordTail, pr.Old.Owner, bound)
	}
	if moved {
		why = fmt.Sprintf("planned move to %s, which holds the furthest tails", chosen.node)
	}
	for _, s := range got {
		if s.cut {
			why += fmt.Sprintf("; %s ranked at %d, its reported %d cut to the history it missed", s.node, s.recordTail, s.rawRecord)
		}
	}
	return Decision{
		Kind:       Promote,
		Assignment: a,
		Start: wire.HistoryStart{
			Epoch:      a.Epoch,
			RecordTail: chosen.recordTail,
			CursorTail: chosen.cursorTail,
			Node:       chosen.node,
		},
		Reason: fmt.Sprintf("promote %s at epoch %d with record tail %d, cursor tail %d: %s (%d of %d answered, R=%d)",
			chosen.node, a.Epoch, chosen.recordTail, chosen.cursorTail, why, len(got), len(nodes), r),
	}
}

// AcceptLoss is pure: for recovery.accept-loss it moves the stream without
// sealing anything. The new owner is node, which must hold a copy of old and
// be live; or, if node is empty, the live copy with the furthest published
// record tail (ties as in Decide; a copy that published nothing ranks below
// any that did). The start is recorded from the new owner's last heartbeat
// tails, or nil if it published none for this stream (then no start is
// recorded and a returning copy is not cut back). belowPrefix reports that
// the promotion lands below the confirmed prefix: its record tail is below
// the latest start's, or it published nothing while a start exists.
//
// Every published tail is first lowered, as Decide's historyTails lowers a
// seal answer, to the cut the copy's host makes before the role change at
// the new epoch, from the copy's published epoch (lowerToCut). A copy that
// had not applied its last role change publishes its raw tail, which can
// hold an older owner's unconfirmed suffix past a later start; ranked or
// recorded by that tail it could win over a copy holding records confirmed
// under the later owner, record a start its own host then cuts below, and
// hide a promotion below the confirmed prefix.
//
// The other live copies of old follow, and the proposal's members that held
// no copy join as followers; copies that are not live are left out, as copies
// that do not answer a seal are.
func AcceptLoss(old wire.Assignment, proposal wire.Assignment, starts []wire.HistoryStart, copies []CopyTails, node string) (a wire.Assignment, start *wire.HistoryStart, belowPrefix bool, err error) {
	held := copyNodes(old)
	tails := make(map[string]CopyTails, len(copies))
	for _, c := range copies {
		if slices.Contains(held, c.Node) {
			if c.Published {
				c.RecordTail, c.CursorTail = lowerToCut(c.RecordTail, c.CursorTail, c.Epoch, old.Epoch+1, starts)
			}
			tails[c.Node] = c
		}
	}
	var live []CopyTails
	for _, n := range held {
		if c, ok := tails[n]; ok && c.Live {
			live = append(live, c)
		}
	}

	var owner CopyTails
	if node != "" {
		if !slices.Contains(held, node) {
			return wire.Assignment{}, nil, false, fmt.Errorf("accept loss of %s: node %s holds no copy of epoch %d (copies %v)", old.Stream, node, old.Epoch, held)
		}
		c, ok := tails[node]
		if !ok || !c.Live {
			return wire.Assignment{}, nil, false, fmt.Errorf("accept loss of %s: node %s is not live", old.Stream, node)
		}
		owner = c
	} else {
		if len(live) == 0 {
			return wire.Assignment{}, nil, false, fmt.Errorf("accept loss of %s: no copy of epoch %d is on a live node (copies %v)", old.Stream, old.Epoch, held)
		}
		owner = slices.MinFunc(live, func(x, y CopyTails) int {
			if x.Published != y.Published {
				if x.Published {
					return -1
				}
				return 1
			}
			return furthest(sealed{node: x.Node, recordTail: x.RecordTail, cursorTail: x.CursorTail}, sealed{node: y.Node, recordTail: y.RecordTail, cursorTail: y.CursorTail})
		})
	}

	var others []string
	for _, c := range live {
		if c.Node != owner.Node {
			others = append(others, c.Node)
		}
	}
	a = newAssignment(old, proposal, owner.Node, others)
	if owner.Published {
		start = &wire.HistoryStart{Epoch: a.Epoch, RecordTail: owner.RecordTail, CursorTail: owner.CursorTail, Node: owner.Node}
	}
	if latest := latestStart(starts); latest != nil {
		belowPrefix = !owner.Published || owner.RecordTail < latest.RecordTail
	}
	return a, start, belowPrefix, nil
}
