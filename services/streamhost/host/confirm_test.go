package host

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

// The confirmer is pure: these tests drive it with appends, acks and
// times and check the replies it returns, with no NATS and no store.

var t0 = time.Unix(1_700_000_000, 0)

const testTimeout = 5 * time.Second

// testConfirmer is a confirmer of owner n1 with followers fs under stamp
// (W from pkg/policy) and floor minCopies, the owner's durable tail at
// tail.
func testConfirmer(stamp string, fs []string, minCopies int, tail uint64) *confirmer {
	c := newConfirmer("s", 9, 3, testTimeout, tail)
	c.setAssignment("n1", fs, policy.StampW(stamp, 1+len(fs)), minCopies)
	return &c
}

// publish adds a first write at off, started at start.
func (c *confirmer) publishAt(off uint64, start time.Time) {
	c.wait(&waiter{reply: fmt.Sprint("r", off), offset: off, deadline: start.Add(c.timeout)})
}

// confirmedOffsets lists the offsets out confirms, failing on a refusal.
func confirmedOffsets(t *testing.T, out []outgoing) []uint64 {
	t.Helper()
	var offs []uint64
	for _, o := range out {
		if o.fail != nil {
			t.Fatalf("refusal %v among confirms", o.fail)
		}
		offs = append(offs, o.ok.Offset)
	}
	return offs
}

func TestConfirmedWatermark(t *testing.T) {
	for _, tc := range []struct {
		name      string
		owner     uint64
		followers []uint64
		stamp     string
		want      uint64
	}{
		{"alone, W=1: the owner's durable tail", 7, nil, policy.MajorityDurable, 7},
		{"E=2 majority W=2: the lower", 7, []uint64{5}, policy.MajorityDurable, 5},
		{"E=3 majority W=2: second highest", 10, []uint64{7, 3}, policy.MajorityDurable, 7},
		{"E=3 majority W=2, a follower ahead of the owner's fsync", 5, []uint64{9, 0}, policy.MajorityDurable, 5},
		{"E=3 majority W=2, both followers ahead: never on followers alone", 5, []uint64{9, 9}, policy.MajorityDurable, 5},
		{"E=3 majority W=2, owner not durable at all yet", 0, []uint64{9, 9}, policy.MajorityDurable, 0},
		{"E=3 local_durable W=3: lowest", 10, []uint64{7, 3}, policy.LocalDurable, 3},
		{"E=3 local_durable W=3, followers ahead", 4, []uint64{7, 6}, policy.LocalDurable, 4},
		{"E=5 majority W=3: third highest with the owner", 10, []uint64{9, 8, 2, 1}, policy.MajorityDurable, 8},
		{"E=5 majority W=3, owner behind", 6, []uint64{9, 8, 2, 1}, policy.MajorityDurable, 6},
		{"E=5 majority W=3, one follower acked", 6, []uint64{9, 0, 0, 0}, policy.MajorityDurable, 0},
		{"E=3 replica_durable:1 W=1: the owner alone", 4, []uint64{7, 6}, "replica_durable:1", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := policy.StampW(tc.stamp, 1+len(tc.followers))
			if got := confirmedWatermark(tc.owner, tc.followers, w); got != tc.want {
				t.Fatalf("confirmedWatermark(%d, %v, W=%d) = %d, want %d", tc.owner, tc.followers, w, got, tc.want)
			}
		})
	}
	if got := confirmedWatermark(5, []uint64{5}, 3); got != 0 {
		t.Fatalf("W above the copies confirmed up to %d", got)
	}
	if got := confirmedWatermark(5, []uint64{5}, 0); got != 0 {
		t.Fatalf("W=0 confirmed up to %d", got)
	}
}

// TestConfirmedWatermarkHeldByWWithOwner: every offset below the watermark
// is held by at least W copies, the owner one of them, and the watermark
// is the highest such point.
func TestConfirmedWatermarkHeldByWWithOwner(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		owner := rapid.Uint64Range(0, 50).Draw(t, "owner")
		fs := rapid.SliceOfN(rapid.Uint64Range(0, 60), 0, 6).Draw(t, "followers")
		w := rapid.IntRange(1, 1+len(fs)).Draw(t, "w")
		wm := confirmedWatermark(owner, fs, w)
		if wm > owner {
			t.Fatalf("watermark %d past the owner's durable tail %d", wm, owner)
		}
		if wm > 0 && 1+holders(fs, wm-1) < w {
			t.Fatalf("offset %d below the watermark held by %d < %d copies", wm-1, 1+holders(fs, wm-1), w)
		}
		if wm < owner && 1+holders(fs, wm) >= w {
			t.Fatalf("offset %d at the watermark is held by the owner and %d followers, W %d: not the highest", wm, holders(fs, wm), w)
		}
	})
}

func TestConfirmerReleases(t *testing.T) {
	type step struct {
		do   func(c *confirmer) []outgoing
		want []uint64 // offsets confirmed by this step
	}
	appended := func(offs ...uint64) func(c *confirmer) []outgoing {
		return func(c *confirmer) []outgoing {
			for _, o := range offs {
				c.publishAt(o, t0)
			}
			c.durable(offs[len(offs)-1] + 1)
			return c.release()
		}
	}
	ack := func(node string, tail uint64) func(c *confirmer) []outgoing {
		return func(c *confirmer) []outgoing {
			c.acked(node, tail, 0, t0)
			return c.release()
		}
	}
	// written: the owner wrote offs but its fsync has not returned.
	written := func(offs ...uint64) func(c *confirmer) []outgoing {
		return func(c *confirmer) []outgoing {
			for _, o := range offs {
				c.publishAt(o, t0)
			}
			return c.release()
		}
	}
	durable := func(tail uint64) func(c *confirmer) []outgoing {
		return func(c *confirmer) []outgoing { c.durable(tail); return c.release() }
	}
	for _, tc := range []struct {
		name  string
		fs    []string
		stamp string
		steps []step
	}{
		{"alone: confirmed when durable", nil, policy.MajorityDurable, []step{
			{appended(0, 1), []uint64{0, 1}},
		}},
		{"E=2: waits for the follower", []string{"n2"}, policy.MajorityDurable, []step{
			{appended(0, 1, 2), nil},
			{ack("n2", 2), []uint64{0, 1}},
			{ack("n2", 3), []uint64{2}},
		}},
		{"E=2: follower first, the owner's fsync confirms", []string{"n2"}, policy.MajorityDurable, []step{
			{written(0, 1), nil},
			{ack("n2", 2), nil},
			{durable(1), []uint64{0}},
			{durable(2), []uint64{1}},
		}},
		{"E=3 majority: both followers ahead, still the owner's fsync", []string{"n2", "n3"}, policy.MajorityDurable, []step{
			{written(0), nil},
			{ack("n2", 1), nil},
			{ack("n3", 1), nil},
			{durable(1), []uint64{0}},
		}},
		{"E=3 majority: one follower is enough", []string{"n2", "n3"}, policy.MajorityDurable, []step{
			{appended(0, 1), nil},
			{ack("n3", 1), []uint64{0}},
			{ack("n3", 2), []uint64{1}},
		}},
		{"E=3 local_durable: every copy", []string{"n2", "n3"}, policy.LocalDurable, []step{
			{appended(0), nil},
			{ack("n3", 1), nil},
			{ack("n2", 1), []uint64{0}},
		}},
		{"an ack of a node that does not follow counts for nothing", []string{"n2"}, policy.MajorityDurable, []step{
			{appended(0), nil},
			{ack("n9", 1), nil},
			{ack("n1", 1), nil},
			{ack("n2", 1), []uint64{0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfirmer(tc.stamp, tc.fs, 0, 0)
			for i, s := range tc.steps {
				got := confirmedOffsets(t, s.do(c))
				if fmt.Sprint(got) != fmt.Sprint(s.want) {
					t.Fatalf("step %d confirmed %v, want %v", i, got, s.want)
				}
			}
			if c.waiting() != 0 {
				t.Fatalf("%d publishes still waiting", c.waiting())
			}
		})
	}
}

func TestConfirmReplyFields(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 0, 0)
	c.publishAt(0, t0)
	c.durable(1)
	c.acked("n2", 1, 0, t0)
	c.acked("n3", 1, 0, t0)
	c.wait(&waiter{reply: "dup", offset: 0, deadline: t0.Add(time.Second).Add(testTimeout), dup: true})
	out := c.release()
	if len(out) != 2 {
		t.Fatalf("%d replies, want 2", len(out))
	}
	want := wire.PublishConfirm{StreamID: 9, Offset: 0, Epoch: 3, Copies: 3, W: 2}
	if *out[0].ok != want || out[0].to != "r0" || !out[0].start.Equal(t0) {
		t.Fatalf("confirm %+v to %s started %v", out[0].ok, out[0].to, out[0].start)
	}
	want.Duplicate = true
	if *out[1].ok != want || out[1].to != "dup" || !out[1].start.Equal(t0.Add(time.Second)) {
		t.Fatalf("duplicate's confirm %+v to %s", out[1].ok, out[1].to)
	}
	if c.watermark != 1 {
		t.Fatalf("watermark %d, want 1", c.watermark)
	}
	// The watermark never moves down, even when a follower goes.
	c.setAssignment("n1", []string{"n4"}, 2, 0)
	c.release()
	if c.watermark != 1 || len(c.acks) != 0 {
		t.Fatalf("after the followers changed: watermark %d, acks %v", c.watermark, c.acks)
	}
}

// TestConfirmerBelowFloor: below min_copies every waiting publish is
// refused not_enough_copies, even one whose record enough copies hold, and
// publishes are confirmed again once the floor is met.
func TestConfirmerBelowFloor(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 3, 0)
	c.publishAt(0, t0)
	c.durable(1)
	c.acked("n2", 1, 0, t0)
	if out := c.release(); len(out) != 1 || out[0].ok == nil {
		t.Fatalf("at the floor: %+v", out)
	}
	c.publishAt(1, t0)
	c.wait(&waiter{reply: "dup", offset: 1, deadline: t0.Add(testTimeout), dup: true})
	c.durable(2)
	c.setAssignment("n1", []string{"n2"}, 2, 3)
	if !c.short() {
		t.Fatal("2 copies under min_copies 3 not short")
	}
	c.acked("n2", 2, 0, t0)
	out := c.release()
	if len(out) != 2 {
		t.Fatalf("below the floor: %d replies, want 2 refusals", len(out))
	}
	for _, o := range out {
		if o.fail == nil || o.fail.Code != wire.CodeNotEnoughCopies {
			t.Fatalf("below the floor answered %+v", o)
		}
	}
	if e := c.floorError(); e.Code != wire.CodeNotEnoughCopies {
		t.Fatalf("floor error %v", e)
	}
	c.setAssignment("n1", []string{"n2", "n3"}, 2, 3)
	c.publishAt(2, t0)
	c.durable(3)
	c.acked("n2", 3, 0, t0)
	if got := confirmedOffsets(t, c.release()); fmt.Sprint(got) != "[2]" {
		t.Fatalf("back at the floor confirmed %v", got)
	}
}

// TestConfirmerFail: once failed, every waiter is refused with the code,
// later ones at once, nothing is confirmed, and no deadline is armed.
func TestConfirmerFail(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2"}, 0, 0)
	c.publishAt(0, t0)
	c.wait(&waiter{reply: "dup", offset: 0, deadline: t0.Add(testTimeout), dup: true})
	c.durable(1)
	out := c.fail(wire.CodeSealed)
	if len(out) != 2 || out[0].fail.Code != wire.CodeSealed || out[1].fail.Code != wire.CodeSealed {
		t.Fatalf("fail answered %+v", out)
	}
	if _, ok := c.nextDeadline(); ok {
		t.Fatal("a deadline armed after the failure")
	}
	c.publishAt(1, t0)
	c.durable(2)
	c.acked("n2", 2, 0, t0)
	out = c.release()
	if len(out) != 1 || out[0].fail == nil || out[0].fail.Code != wire.CodeSealed {
		t.Fatalf("a publish after the failure answered %+v", out)
	}
	if out := c.fail(wire.CodeNotOwner); len(out) != 0 || c.failCode != wire.CodeSealed {
		t.Fatalf("a second fail: %+v, code %s", out, c.failCode)
	}
}

func TestConfirmerExpire(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 0, 0)
	c.publishAt(0, t0)
	c.publishAt(1, t0.Add(time.Second))
	c.wait(&waiter{reply: "dup", offset: 0, deadline: t0.Add(testTimeout / 2), dup: true})
	c.durable(2)
	if d, ok := c.nextDeadline(); !ok || !d.Equal(t0.Add(testTimeout/2)) {
		t.Fatalf("next deadline %v %v, want the repeat's", d, ok)
	}
	if out := c.expire(t0.Add(testTimeout / 4)); len(out) != 0 {
		t.Fatalf("expired before any deadline: %+v", out)
	}
	out := c.expire(t0.Add(testTimeout))
	if len(out) != 2 {
		t.Fatalf("%d expired, want the first write and the repeat", len(out))
	}
	for _, o := range out {
		if o.fail == nil || o.fail.Code != wire.CodeConfirmTimeout || o.fail.Copies == nil || *o.fail.Copies != 1 {
			t.Fatalf("expiry %+v", o.fail)
		}
	}
	if d, ok := c.nextDeadline(); !ok || !d.Equal(t0.Add(time.Second+testTimeout)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	// An expired publish is never confirmed afterwards.
	c.acked("n2", 2, 0, t0)
	if got := confirmedOffsets(t, c.release()); fmt.Sprint(got) != "[1]" {
		t.Fatalf("confirmed %v after the expiry, want [1]", got)
	}
	if _, ok := c.nextDeadline(); ok {
		t.Fatal("a deadline with nothing waiting")
	}
}

func TestConfirmerSettledAndRetention(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 0, 10)
	now := t0
	c.acked("n2", 10, 0, now)
	c.acked("n3", 4, 0, now.Add(-liveFollower))
	c.release()
	if c.watermark != 10 {
		t.Fatalf("watermark %d", c.watermark)
	}
	if !c.settled(now) {
		t.Fatal("not settled: the lagging follower is not live")
	}
	if keep := c.retentionKeepFrom(now); keep != 10 {
		t.Fatalf("keep from %d, want 10", keep)
	}
	c.acked("n3", 4, 0, now)
	if c.settled(now) {
		t.Fatal("settled with a live follower behind")
	}
	if keep := c.retentionKeepFrom(now); keep != 4 {
		t.Fatalf("keep from %d, want the live follower's 4", keep)
	}
	c.publishAt(10, now)
	c.acked("n3", 10, 0, now)
	if c.settled(now) {
		t.Fatal("settled with a publish waiting")
	}
}

func TestConfirmerAssignment(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, nil, 0, 0)
	// Repeats and the owner itself are not followers; W comes from the
	// assignment's copies (owner and two followers).
	c.setAssignment("n1", []string{"n2", "n1", "n2", "n3"}, policy.StampW(policy.MajorityDurable, 3), 0)
	if fmt.Sprint(c.followers) != "[n2 n3]" || c.copies != 3 || c.w != 2 {
		t.Fatalf("followers %v copies %d W %d", c.followers, c.copies, c.w)
	}
	c.acked("n2", 1, 0, t0)
	c.acked("n3", 1, 0, t0)
	c.setAssignment("n1", []string{"n3"}, 2, 0)
	if _, ok := c.acks["n2"]; ok || len(c.acks) != 1 {
		t.Fatalf("acks after n2 left: %v", c.acks)
	}
}

// TestConfirmerStillAt: a host wait naming the tails a follower acked last
// keeps it live; naming others refreshes nothing and acks nothing.
func TestConfirmerStillAt(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 0, 10)
	old := t0.Add(-liveFollower)
	c.acked("n2", 10, 0, t0)
	c.acked("n3", 4, 1, old)
	c.stillAt("n3", 5, 1, t0) // not what it acked: no refresh, no ack
	if a := c.acks["n3"]; a.record != 4 || !a.at.Equal(old) {
		t.Fatalf("n3 %+v after a host wait naming other tails", a)
	}
	if !c.settled(t0) {
		t.Fatal("not settled with only a stale follower behind")
	}
	c.stillAt("n3", 4, 1, t0)
	if a := c.acks["n3"]; a.record != 4 || !a.at.Equal(t0) {
		t.Fatalf("n3 %+v after a host wait naming its acked tails", a)
	}
	if c.settled(t0) {
		t.Fatal("settled with a follower asleep on a host wait behind")
	}
	c.stillAt("n4", 4, 1, t0)
	if _, ok := c.acks["n4"]; ok {
		t.Fatal("a node that is no follower recorded")
	}
}

// TestConfirmerAckBelow: tails past a follower's counted ack are an ack on
// its way, timed from the first host wait that named them, across later
// ones and acks that move nothing; an ack that moves the count starts the
// time again. Tails at or below the count, or a follower with no ack
// counted, are not an ack on its way. Review: timed per host wait, a lost
// ack left the copy asleep while host waits kept replacing one another.
func TestConfirmerAckBelow(t *testing.T) {
	c := testConfirmer(policy.MajorityDurable, []string{"n2", "n3"}, 0, 10)
	t1, t2, t3 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(3*time.Second)
	c.acked("n2", 4, 1, t0)
	for _, tc := range []struct {
		record, cursor uint64
		now            time.Time
		below          bool
		since          time.Time
	}{
		{4, 1, t1, false, time.Time{}}, // the counted ack itself
		{3, 1, t1, false, time.Time{}}, // below it
		{5, 0, t1, false, time.Time{}}, // off it
		{5, 1, t1, true, t1},           // past it: first named now
		{5, 1, t2, true, t1},           // named again later: since the first
		{4, 2, t2, true, t1},
	} {
		below, since := c.ackBelow("n2", tc.record, tc.cursor, tc.now)
		if below != tc.below || !since.Equal(tc.since) {
			t.Fatalf("ackBelow(n2, %d, %d) = %v since %v; want %v since %v", tc.record, tc.cursor, below, since, tc.below, tc.since)
		}
	}
	c.acked("n2", 3, 1, t2) // an older ack, served late: nothing moves
	if below, since := c.ackBelow("n2", 5, 1, t3); !below || !since.Equal(t1) {
		t.Fatalf("after an ack that moved nothing: %v since %v; want since %v", below, since, t1)
	}
	c.acked("n2", 5, 1, t2)
	if below, since := c.ackBelow("n2", 6, 1, t3); !below || !since.Equal(t3) {
		t.Fatalf("after the ack moved: %v since %v; want since %v", below, since, t3)
	}
	if below, _ := c.ackBelow("n3", 5, 1, t3); below {
		t.Fatal("a follower with no ack counted taken to have one on its way")
	}
}
