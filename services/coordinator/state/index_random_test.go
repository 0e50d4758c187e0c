package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestIndexRandom: random runs of every command (most refused, many
// applied) on three streams and four nodes; after each, the index Apply
// kept equals one rebuilt from the streams, and so do those of a saved and
// loaded copy and of a clone. It catches an Apply path that forgets to
// update the index for some command and state.
func TestIndexRandom(t *testing.T) {
	nodes := []string{"h1", "h2", "h3", "h4"}
	names := []string{"a", "b", "c"}
	applied := map[string]int{}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 3))
		s := New()
		for _, n := range nodes {
			s.Apply(NodeSeen(n, 1, 1))
		}
		pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
		asg := func() wire.Assignment {
			p := rng.Perm(len(nodes))
			k := 1 + rng.IntN(3)
			a := wire.Assignment{Owner: nodes[p[0]], Followers: []string{}, Policy: "majority_durable"}
			for _, i := range p[1:k] {
				a.Followers = append(a.Followers, nodes[i])
			}
			return a
		}
		for step := range 200 {
			name := pick(names)
			st := s.Streams[name]
			ver, tr := uint64(rng.IntN(5)), uint64(rng.IntN(5))
			var a wire.Assignment
			if st != nil {
				if rng.IntN(4) > 0 {
					ver = st.Version
				}
				if st.Recovery != nil && rng.IntN(4) > 0 {
					tr = st.Recovery.Transition
				}
				a = CloneAssignment(st.Assignment)
			}
			b := asg()
			at := int64(step + 2)
			var c Command
			switch op := rng.IntN(24); {
			case op < 4: // nodes come back more often than they go
				c = NodeSeen(pick(nodes), uint64(1+rng.IntN(3)), at)
			case op == 4:
				c = NodeExpire(pick(nodes), 1, "ttl", at)
			case op == 5:
				c = NodeLeave(pick(nodes), 0, at)
			case op == 6:
				c = NodeDrain(pick(nodes), at)
			case op == 7:
				c = NodeUndrain(pick(nodes), at)
			case op < 10:
				c = StreamCreate(name, 1+len(b.Followers)+rng.IntN(2), "", wire.Retention{}, b, at).WithLimits(rng.IntN(4), rng.IntN(4))
			case op == 10:
				c = StreamDelete(name, at)
			case op == 11:
				n := 1 + rng.IntN(3)
				pol := []string{"", "majority_durable", "all_durable", "one_durable"}[rng.IntN(4)]
				c = StreamUpdate(name, wire.StreamUpdate{MinCopies: &n, Policy: pol}, "", "", at)
			case op < 14:
				// Grow by a node holding no copy, or shrink by a follower.
				if f := a.Followers; len(f) > 0 && rng.IntN(2) == 0 {
					a.Followers = f[:len(f)-1]
				} else if n := pick(nodes); st != nil && !slices.Contains(a.Copies(), n) {
					a.Followers = append(a.Followers, n)
				}
				c = AssignUpdate(name, ver, a, at)
			case op < 16:
				reason := []string{"expired", ReasonGrow, ReasonMove, ReasonSealed}[rng.IntN(4)]
				p := a
				if len(a.Followers) > 0 {
					p.Owner, p.Followers = a.Followers[0], append([]string{a.Owner}, a.Followers[1:]...)
				}
				c = RecoveryBegin(name, ver, p, reason, "", "", at)
			case op < 19:
				n := a
				if st != nil && st.Recovery != nil && rng.IntN(2) == 0 {
					n = CloneAssignment(st.Recovery.Proposal)
				}
				n.Epoch++
				if len(n.Followers) > 0 && rng.IntN(2) == 0 {
					n.Followers = n.Followers[1:]
				}
				c = RecoveryCommit(name, tr, ver, n, wire.HistoryStart{Epoch: n.Epoch, Node: n.Owner}, "", "", at)
			case op == 19:
				c = RecoveryWait(name, tr, wire.RecoveryWait{Kind: "answers"}, at)
			case op == 20:
				c = RecoveryWithdraw(name, at)
			case op == 21:
				n := b
				if st != nil {
					n.Stream, n.StreamID, n.Epoch = name, st.ID, st.Assignment.Epoch+1
				}
				c = RecoveryAccept(name, ver, n, nil, &wire.AcceptedLoss{}, "", "", at)
			default:
				c = AttentionClear(name, at)
			}
			r := s.Apply(c)
			if r.Code == "" {
				applied[c.Op]++
			}
			checkIndex(t, s, fmt.Sprintf("seed %d step %d %s", seed, step, c.Op))
		}
		checkIndex(t, saveLoad(t, s), "load")
		checkIndex(t, s.Clone(), "clone")
	}
	t.Logf("applied: %v", applied)
	for _, op := range []string{"stream.create", "stream.delete", "stream.update", "assign.update", "recovery.begin",
		"recovery.commit", "recovery.wait", "recovery.withdraw", "recovery.accept", "attention.clear", "node.expire", "node.drain"} {
		if applied[op] < 10 {
			t.Errorf("%s applied %d times: the runs no longer exercise it", op, applied[op])
		}
	}
}
