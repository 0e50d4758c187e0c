package judge

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// scaleFixture is an idle cluster of n serving streams of three copies on
// four hosts, every copy published by its host and caught up: the state
// the attention service judges every Refresh at scale.
func scaleFixture(n int) *fixture {
	f := newFixture()
	nodes := []string{"h1", "h2", "h3", "h4"}
	copies := map[string][]wire.CopyStatus{}
	for _, node := range nodes {
		f.node(node, wire.NodeLive)
	}
	for i := range n {
		name := fmt.Sprintf("s%05d", i)
		owner, f1, f2 := nodes[i%4], nodes[(i+1)%4], nodes[(i+2)%4]
		a := wire.Assignment{Stream: name, StreamID: uint64(i + 1), Epoch: 1, Owner: owner, Followers: []string{f1, f2}, Policy: policy.MajorityDurable}
		f.stream(serving(a))
		for _, node := range []string{owner, f1, f2} {
			role := wire.RoleFollower
			if node == owner {
				role = wire.RoleOwner
			}
			copies[node] = append(copies[node], wire.CopyStatus{Stream: name, StreamID: uint64(i + 1), Role: role, Epoch: 1, RecordTail: 100, CursorTail: 10})
		}
	}
	for _, node := range nodes {
		cs := copies[node]
		slices.SortFunc(cs, func(a, b wire.CopyStatus) int { return cmpString(a.Stream, b.Stream) })
		f.hb(node, cs...)
	}
	return f
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BenchmarkJudgeIdle10k judges an idle cluster of 10,000 streams, as the
// service does every Refresh.
func BenchmarkJudgeIdle10k(b *testing.B) {
	f := scaleFixture(10000)
	mem := NewMemory()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Judge(cfg, f.view, f.hbs, mem, f.now.Add(time.Duration(i)*time.Millisecond))
	}
}
