package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// MaxSealTimeoutFactor caps a node's grown seal timeout (NextSealTimeout)
// at this many times the configured one.
const MaxSealTimeoutFactor = 8

// runState is what one worker's Run carries from a round to the next.
//
// kept holds the valid seal answers of earlier rounds, by node, for one
// stream id, fence epoch and transition (key): a copy that answered is not
// sealed again at the same fence, only the copies still unanswered are.
// That is safe because an answer cannot go stale at its fence
// (docs/failover.md, "Seal answers kept across rounds"): the host persists
// the fence before it replies, so the copy's durable tails cannot grow from
// an owner below the fence, and no owner at or past it exists before this
// recovery commits; the confirmed bound an old owner reported is final, as
// its role stopped before the reply. What could make one stale is the
// copy itself changing under it: a restarted host (its disk may be gone, a
// restart without that loss still forgets the confirmed bound), so an
// answer is dropped once its node's incarnation is not the one it was
// asked at; a node gone (expired or left), whose copy is out of reach, so
// its answer is dropped and it is sealed again; a different stream id,
// fence or transition, so the set is dropped when the key changes (a
// withdrawn transition stops the worker anyway). Kept answers count toward
// R and the furthest tails but are promoted only with fresh proof of
// life: Worker.decideFresh seals a chosen copy with a kept answer again
// first, unless its node was heard since the answer (Worker.LastHeard).
//
// timeouts are the nodes' seal timeouts for the next round
// (NextSealTimeout); logged is the wait kind last logged and waits the
// rounds that waited.
type runState struct {
	key      keptKey
	kept     map[string]Answer
	timeouts map[string]time.Duration
	logged   string
	waits    int
}

// keptKey is what kept answers are valid for.
type keptKey struct{ streamID, fence, transition uint64 }

func keyOf(pr wire.PendingRecovery) keptKey {
	return keptKey{pr.Old.StreamID, pr.Old.Epoch + 1, pr.Transition}
}

// prune drops the kept answers that no longer hold for pr: all of them
// when pr's stream id, fence or transition is not theirs, those of a node
// whose incarnation (as incarnation tells now; it must not be nil) is not the one it was asked
// at, and those of a node gone reports gone (expired or left: sealed again,
// it will not answer, and is left out as on a first round).
func (rs *runState) prune(log *slog.Logger, pr wire.PendingRecovery, incarnation func(string) (uint64, bool), gone func(string) bool) {
	if rs.rekey(pr) {
		return
	}
	for node, a := range rs.kept {
		inc, known := incarnation(node)
		switch {
		case known != a.incKnown || inc != a.incarnation:
			delete(rs.kept, node)
			log.Info("recovery: node restarted since its seal answer; sealing it again", "node", node,
				"answered_incarnation", a.incarnation, "incarnation", inc)
		case gone != nil && gone(node):
			delete(rs.kept, node)
			log.Info("recovery: node gone since its seal answer; sealing it again", "node", node)
		}
	}
}

// rekey drops every kept answer when pr's stream id, fence or transition
// is not theirs, and reports whether it did.
func (rs *runState) rekey(pr wire.PendingRecovery) bool {
	k := keyOf(pr)
	if k == rs.key {
		return false
	}
	rs.key, rs.kept = k, nil
	return true
}

// current replaces each answer of answers reused from an earlier round
// (kept) that prune has dropped since with a missing one, so that a round
// decides only on kept answers that still hold.
func (rs *runState) current(answers []Answer) {
	for i, a := range answers {
		if _, ok := rs.kept[a.Node]; a.kept && !ok {
			answers[i] = Answer{Node: a.Node, Err: fmt.Errorf("seal %s: %w", a.Node, errKeptDropped)}
		}
	}
}

// errKeptDropped is the answer of a copy whose kept answer was dropped
// after its round began; the next round seals it again.
var errKeptDropped = errors.New("its earlier answer no longer holds (node restarted or gone); sealing it again next round")

// keep adds the round's valid answers to the kept ones, and sets each
// sealed node's next timeout from its answer.
func (rs *runState) keep(pr wire.PendingRecovery, answers []Answer, base time.Duration) {
	rs.rekey(pr)
	fence := pr.Old.Epoch + 1
	for _, a := range answers {
		if _, ok := rs.kept[a.Node]; ok {
			continue
		}
		if next := NextSealTimeout(rs.timeout(a.Node, base), base, a.Err == nil, sealTimedOut(a)); next != base || rs.timeouts != nil {
			if rs.timeouts == nil {
				rs.timeouts = map[string]time.Duration{}
			}
			rs.timeouts[a.Node] = next
		}
		if validAnswer(a, fence, pr.Transition) == nil {
			if rs.kept == nil {
				rs.kept = map[string]Answer{}
			}
			rs.kept[a.Node] = a
		}
	}
}

// timeout is node's seal timeout for this round: base until one of its
// seals timed out.
func (rs *runState) timeout(node string, base time.Duration) time.Duration {
	if d, ok := rs.timeouts[node]; ok && d > 0 {
		return d
	}
	return base
}

// sealTimedOut reports whether a's seal ended at its deadline: the
// caller's own, or the batch's, at which the host answers a seal still
// running timeout (the seal batches' timeout_ms).
func sealTimedOut(a Answer) bool {
	return errors.Is(a.Err, context.DeadlineExceeded) || (a.Err != nil && wire.CodeOf(a.Err) == wire.CodeTimeout)
}

// NextSealTimeout is pure: a node's seal timeout for the next round, given
// the one its last seal had (cur), the configured one (base) and how that
// seal ended. A seal that timed out doubles it, up to MaxSealTimeoutFactor
// times base: the node (or the coordinator) is slow to answer, as under a
// mass failover's seals, and asking again with the same deadline would only
// resend work whose answer comes too late again. An answer resets it to
// base; any other failure (no responders, overloaded, not found) leaves it
// as it was.
func NextSealTimeout(cur, base time.Duration, answered, timedOut bool) time.Duration {
	if cur <= 0 {
		cur = base
	}
	switch {
	case answered:
		return base
	case timedOut:
		return min(2*cur, MaxSealTimeoutFactor*base)
	default:
		return cur
	}
}
