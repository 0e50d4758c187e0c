package server

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
)

// TestNoQuorumAnswersUnavailableWithinASecond: with two of three
// coordinators gone, the survivor answers every admin request within a
// second: reads, and writes that have not sent their proposal yet, with a
// coded unavailable saying the coordinators have no quorum (writes adding
// that the change may or may not have been applied), cluster.info with what this replica knows. Once quorum returns,
// requests are answered normally. Without the rule a request waited for
// the Raft read or proposal until requestTimeout (5 s), longer than any
// client waits. The requests go out right after the loss, while the
// survivor still takes the dead leader for its leader (for an election
// timeout, 1.5 to 3 s): knowing no leader is not enough, the survivor's
// own read-index round (ConfirmQuorum) must answer them in time.
func TestNoQuorumAnswersUnavailableWithinASecond(t *testing.T) {
	c := newCluster(t, 3, func(o *Options) { o.NATSSystemURL = "" })
	c.host("h1")
	c.host("h2")
	testutil.Eventually(t, 5*time.Second, "two live hosts", func() bool {
		var ci wire.ClusterInfo
		return c.admin(wire.VerbClusterInfo, "", &ci) == nil && len(ci.Nodes) == 2
	})
	c.create("s1", 2)
	lead := c.leader()
	var down []uint64
	for id := range c.servers {
		if id != lead && len(down) < 1 {
			down = append(down, id)
		}
	}
	down = append(down, lead)
	for _, id := range down {
		c.kill(id)
	}
	for id, s := range c.servers {
		if l, ok := s.store.Leader(); !ok || l != lead {
			t.Logf("survivor %d: leader %d (known %v) right after the loss", id, l, ok)
		}
	}

	check := func(verb string, body any, write bool) {
		t.Helper()
		began := time.Now()
		e := c.admin(verb, body, nil)
		took := time.Since(began)
		if e == nil || e.Code != wire.CodeUnavailable || !strings.Contains(e.Message, "no quorum") {
			t.Fatalf("%s without quorum: %v, want unavailable saying no quorum", verb, e)
		}
		if write != strings.Contains(e.Message, "may or may not have been applied") {
			t.Fatalf("%s without quorum: %q (write %v)", verb, e.Message, write)
		}
		if took > time.Second {
			t.Fatalf("%s without quorum answered after %v, want within 1s", verb, took)
		}
		t.Logf("%s answered in %v: %s", verb, took.Round(time.Millisecond), e.Message)
	}
	check(wire.VerbStreamInfo, wire.StreamRef{Stream: "s1"}, false)
	check(wire.VerbStreamList, "", false)
	check(wire.VerbStreamCreate, wire.StreamCreate{Stream: "s2", Copies: 1}, true)
	// A write whose proposal was sent (node.drain proposes at once) is
	// answered by that proposal, not by the quorum check: it may commit
	// (TestCommittedCreateIsNotAnsweredUnavailable).

	began := time.Now()
	var ci wire.ClusterInfo
	if e := c.admin(wire.VerbClusterInfo, "", &ci); e != nil {
		t.Fatalf("cluster.info without quorum: %v", e)
	}
	if took := time.Since(began); took > time.Second || ci.Leader != 0 || !ci.Local || len(ci.Nodes) != 2 {
		t.Fatalf("cluster.info without quorum after %v: %+v", took, ci)
	}

	for _, id := range down {
		c.start(id)
	}
	c.leader()
	if i := c.info("s1"); i.Status != wire.StatusServing {
		t.Fatalf("after quorum returned: %+v", i)
	}
	// The create answered unavailable may or may not have been applied;
	// here it never reached a leader, so it was not.
	if e := c.admin(wire.VerbStreamInfo, wire.StreamRef{Stream: "s2"}, nil); e == nil || e.Code != wire.CodeNotFound {
		t.Fatalf("s2 after quorum returned: %v", e)
	}
}

// TestCommittedCreateIsNotAnsweredUnavailable: a create whose proposal
// committed and that then waits for its owner to serve (ownerServes, up to
// ownerServeWait) is answered with its outcome even when the quorum check
// fails meanwhile (here every read-index round fails, as one does when the
// leader is held up past quorumProbe). Answering unavailable told the
// caller a committed change may not have been applied, and pkg/client
// repeats a write on unavailable: the repeated create met exists, so the
// caller was told its successful create failed.
func TestCommittedCreateIsNotAnsweredUnavailable(t *testing.T) {
	var probes atomic.Int64
	c := newCluster(t, 1, func(o *Options) {
		o.NATSSystemURL = ""
		o.confirmQuorum = func(time.Duration) error {
			probes.Add(1)
			return errors.New("read index: no answer (test)")
		}
	})
	c.hostWith("h1", true) // never serves: the create waits ownerServeWait after its commit
	c.liveHosts(1)
	var info wire.StreamInfo
	if e := c.admin(wire.VerbStreamCreate, wire.StreamCreate{Stream: "held", Copies: 1}, &info); e != nil {
		t.Fatalf("create that committed answered %v (after %d failed quorum probes), want its info", e, probes.Load())
	}
	if info.Status != wire.StatusPlacing || info.StreamID == 0 {
		t.Fatalf("create answered %+v, want the stream placed (status placing)", info)
	}
	if probes.Load() != 0 {
		t.Fatalf("%d quorum probes after the proposal was sent, want none", probes.Load())
	}
}
