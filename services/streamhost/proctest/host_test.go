package proctest

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/policy"
	"github.com/brook-streams/brook/pkg/wire"
)

var three = []string{"h1", "h2", "h3"}

// startThree starts h1..h3 with stream owned by h1 and followed by h2, h3
// on majority_durable, and waits until every copy plays its role.
func startThree(t *testing.T, stream string, id uint64, extra ...string) *cluster {
	c := newCluster(t)
	c.assign(asg(stream, id, 1, "h1", []string{"h2", "h3"}, policy.MajorityDurable))
	for _, n := range three {
		c.start(n, extra...)
	}
	c.waitCopy("h1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	}
	return c
}

// TestPublishReplicatesMajority: publishes on majority_durable with E=3 are
// confirmed at consecutive offsets by at least W=2 copies, both followers
// end up holding them (same tails and digest in seal replies), readers and
// cursors see them, and duplicates and oversized records are answered as
// such.
func TestPublishReplicatesMajority(t *testing.T) {
	const stream, id = "orders", 11
	c := startThree(t, stream, id)

	for i := 0; i < 20; i++ {
		pc := c.mustPublish(stream, rec(i))
		if pc.Offset != uint64(i) || pc.Epoch != 1 || pc.Copies < policy.StampW(policy.MajorityDurable, 3) || pc.Duplicate {
			t.Fatalf("publish %d: confirm %+v; want offset %d epoch 1 copies >= 2", i, pc, i)
		}
	}

	// A repeat of a producer sequence gets the first write's offset.
	hdr := map[string]string{wire.HeaderProducer: "p1", wire.HeaderSequence: "7"}
	first := c.publish(stream, rec(20), hdr)
	again := c.publish(stream, rec(20), hdr)
	if first.ok == nil || again.ok == nil || first.ok.Offset != 20 || again.ok.Offset != 20 || first.ok.Duplicate || !again.ok.Duplicate {
		t.Fatalf("dedupe: first %v, repeat %v; want both at offset 20, the repeat flagged duplicate", first, again)
	}
	if r := c.publish(stream, make([]byte, 65537), nil); r.err == nil || r.err.Code != wire.CodePayloadTooLarge {
		t.Fatalf("oversized publish: %v; want payload_too_large", r)
	}
	if r := c.publish(stream, rec(21), map[string]string{wire.HeaderProducer: "p1", wire.HeaderSequence: "x"}); r.err == nil || r.err.Code != wire.CodeBadRequest {
		t.Fatalf("publish with a bad sequence: %v; want bad_request", r)
	}

	b, err := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 0, 21)
	if b.Confirmed != 21 || b.Next != 21 || b.Epoch != 1 {
		t.Fatalf("batch confirmed %d next %d epoch %d; want 21, 21, 1", b.Confirmed, b.Next, b.Epoch)
	}
	b, err = c.fetch(stream, wire.FetchRequest{Start: "offset", Offset: 5, MaxRecords: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 5, 3)

	// Cursors: a new one starts at the head, a committed one resumes.
	b, err = c.fetch(stream, wire.FetchRequest{Cursor: "reader", MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 0, 2)
	if r, err := c.commit(stream, "reader", 12); err != nil || r.Offset != 12 {
		t.Fatalf("commit: %+v, %v", r, err)
	}
	b, err = c.fetch(stream, wire.FetchRequest{Cursor: "reader", MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 12, 2)
	if _, err := c.commit(stream, "reader", 999); codeOf(err) != wire.CodeBadRequest {
		t.Fatalf("commit past the watermark: %v; want bad_request", err)
	}
	if _, err := c.fetch(stream, wire.FetchRequest{}); codeOf(err) != wire.CodeBadRequest {
		t.Fatalf("fetch without a position: %v; want bad_request", err)
	}

	// Both followers hold every record and the cursor event.
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "record tail 21, cursor tail 1", func(cs wire.CopyStatus) bool { return cs.RecordTail == 21 && cs.CursorTail == 1 })
	}
	// The owner's heartbeat may predate the last confirms (it beats every
	// 100ms): wait for one that reports them.
	c.waitCopy("h1", stream, "heartbeat reporting confirmed 21", func(cs wire.CopyStatus) bool { return cs.Confirmed == 21 })
	var replies []wire.SealReply
	for _, n := range three {
		replies = append(replies, c.mustSeal(n, stream, id, 2, 1))
	}
	for _, r := range replies {
		if r.RecordTail != 21 || r.CursorTail != 1 || r.Digest != replies[0].Digest || r.Digest == "" {
			t.Fatalf("seal replies differ: %+v vs %+v", r, replies[0])
		}
	}
}

// TestRetention: the owner advances its head by the stream's retention
// once its live followers hold the records.
func TestRetention(t *testing.T) {
	const stream, id = "trimmed", 21
	c := newCluster(t)
	a := asg(stream, id, 1, "h1", []string{"h2", "h3"}, policy.MajorityDurable)
	a.Retention = wire.Retention{MaxRecords: 5}
	c.assign(a)
	for _, n := range three {
		c.start(n)
	}
	c.waitCopy("h1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	for i := 0; i < 20; i++ {
		c.mustPublish(stream, rec(i))
	}
	var head uint64
	c.waitFor(15*time.Second, "the owner's head at 15", func() bool {
		b, err := c.fetch(stream, wire.FetchRequest{Start: "earliest", MaxRecords: 1})
		if err != nil {
			t.Fatal(err)
		}
		head = b.Head
		return head == 15
	})
	b, err := c.fetch(stream, wire.FetchRequest{Start: "offset", Offset: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 15, 5) // a position below the head reads from the head
}

// TestFollowerLoss: with one follower SIGKILLed, publishes still confirm on
// W=2 copies; with both gone they time out with confirm_timeout, are never
// confirmed, and no reader receives them. A publish waiting when the owner
// is sealed is answered sealed.
func TestFollowerLoss(t *testing.T) {
	const stream, id = "events", 12
	c := startThree(t, stream, id, "--confirm-timeout", "3s")
	for i := 0; i < 5; i++ {
		c.mustPublish(stream, rec(i))
	}

	c.hosts["h3"].kill()
	for i := 5; i < 10; i++ {
		if pc := c.mustPublish(stream, rec(i)); pc.Offset != uint64(i) || pc.Copies != 2 {
			t.Fatalf("publish %d with h3 dead: %+v; want offset %d on 2 copies", i, pc, i)
		}
	}

	c.hosts["h2"].kill()
	// A reader long-polling at the watermark must not receive what follows.
	var wg sync.WaitGroup
	var polled struct {
		n   int
		err error
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		b, err := c.fetch(stream, wire.FetchRequest{Start: "offset", Offset: 10, WaitMS: 3500})
		if err == nil {
			polled.n = len(b.Records)
		}
		polled.err = err
	}()
	start := time.Now()
	r := c.publish(stream, rec(10), nil)
	if r.err == nil || r.err.Code != wire.CodeConfirmTimeout || r.err.Copies == nil || *r.err.Copies != 1 {
		t.Fatalf("publish with both followers dead: %v; want confirm_timeout with copies 1", r)
	}
	if el := time.Since(start); el < 3*time.Second {
		t.Fatalf("confirm_timeout after %v, before the 3s confirm timeout", el)
	}
	wg.Wait()
	if polled.err != nil || polled.n != 0 {
		t.Fatalf("long-polling reader got %d records (err %v); want none past the watermark", polled.n, polled.err)
	}
	b, err := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 0, 10)
	if b.Tail != 11 || b.Confirmed != 10 {
		t.Fatalf("batch tail %d confirmed %d; want the unconfirmed record at 10 held but not served", b.Tail, b.Confirmed)
	}
	if cs, _ := c.copyStatus("h1", stream); cs.Confirmed > 10 {
		t.Fatalf("owner reports confirmed %d past 10", cs.Confirmed)
	}

	// A publish waiting for its confirm fails with sealed when the owner is
	// sealed, and the owner stops serving the stream.
	pending := make(chan pubResult, 1)
	go func() { pending <- c.publish(stream, rec(11), nil) }()
	c.waitCopy("h1", stream, "record 11 appended", func(cs wire.CopyStatus) bool { return cs.RecordTail == 12 })
	sr := c.mustSeal("h1", stream, id, 2, 1)
	if sr.RecordTail != 12 || sr.FenceEpoch != 2 {
		t.Fatalf("seal reply %+v; want record tail 12 fence 2", sr)
	}
	if r := <-pending; r.err == nil || r.err.Code != wire.CodeSealed {
		t.Fatalf("pending publish after the seal: %v; want sealed", r)
	}
	if r := c.publish(stream, rec(12), nil); !errors.Is(r.nats, nats.ErrNoResponders) {
		t.Fatalf("publish to a sealed owner: %v; want no responders", r)
	}
	if _, err := c.seal("h1", stream, id, 1, 1); codeOf(err) != wire.CodeStaleEpoch {
		t.Fatalf("seal at an older fence: %v; want stale_epoch", err)
	}
	if _, err := c.seal("h1", stream, id+1, 3, 1); codeOf(err) != wire.CodeNotFound {
		t.Fatalf("seal of another stream id: %v; want not_found", err)
	}
}

// TestSealReleasePromote: an owner restarted at the same epoch resumes at
// its tail; after a seal of every copy at the next epoch, an assignment
// that includes them releases the seals and promotes a follower at its own
// tails, which serves publishes at the next offset while the others follow.
func TestSealReleasePromote(t *testing.T) {
	const stream, id = "ledger", 13
	c := startThree(t, stream, id)
	for i := 0; i < 8; i++ {
		c.mustPublish(stream, rec(i))
	}
	// A graceful restart closes the store, so the owner serves its epoch
	// again. (After a crash it would seal its copy at the next epoch
	// instead: host.TestRestartedOwnerSealsItsEpoch.)
	if err := c.hosts["h1"].term(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.start("h1")
	c.waitCopy("h1", stream, "owner again", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	for i := 8; i < 10; i++ {
		if pc := c.mustPublish(stream, rec(i)); pc.Offset != uint64(i) {
			t.Fatalf("publish after the owner restarted: offset %d, want %d", pc.Offset, i)
		}
	}
	if _, err := c.commit(stream, "c1", 4); err != nil {
		t.Fatal(err)
	}
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "caught up", func(cs wire.CopyStatus) bool { return cs.RecordTail == 10 && cs.CursorTail == 1 })
	}

	var seals []wire.SealReply
	for _, n := range three {
		seals = append(seals, c.mustSeal(n, stream, id, 2, 1))
	}
	for _, n := range three {
		c.waitCopy(n, stream, "sealed, no role", func(cs wire.CopyStatus) bool { return cs.Sealed && cs.Role == wire.RoleNone })
	}
	if r := c.publish(stream, rec(10), nil); !errors.Is(r.nats, nats.ErrNoResponders) {
		t.Fatalf("publish while every copy is sealed: %v; want no responders", r)
	}
	h2 := seals[1]
	c.assign(asg(stream, id, 2, "h2", []string{"h1", "h3"}, policy.MajorityDurable,
		wire.HistoryStart{Epoch: 1, Node: "h1"},
		wire.HistoryStart{Epoch: 2, RecordTail: h2.RecordTail, CursorTail: h2.CursorTail, Node: "h2"}))
	c.waitCopy("h2", stream, "owner at epoch 2, unsealed", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2 && !cs.Sealed
	})
	pc := c.mustPublish(stream, rec(10))
	if pc.Offset != 10 || pc.Epoch != 2 {
		t.Fatalf("first publish on the promoted copy: %+v; want offset 10 epoch 2", pc)
	}
	b, err := c.fetch(stream, wire.FetchRequest{Cursor: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 4, 7)
	for _, n := range []string{"h1", "h3"} {
		c.waitCopy(n, stream, "following at epoch 2 with record 10", func(cs wire.CopyStatus) bool {
			return cs.Role == wire.RoleFollower && cs.Epoch == 2 && !cs.Sealed && cs.RecordTail == 11
		})
	}
	if !strings.Contains(c.hosts["h2"].log(), "seal released") || !strings.Contains(c.hosts["h2"].log(), "promoted to owner") {
		t.Fatal("h2's log does not show the release and promotion")
	}
}

// TestReturningCopyIsCut: the old owner appends records its dead followers
// never get (unconfirmed), dies, the followers are sealed and one promoted;
// when the old owner returns and is added back as a follower, its longer
// suffix (records and cursor events) is cut at the new owner's start and
// it takes the new owner's entries, ending identical to the new owner.
func TestReturningCopyIsCut(t *testing.T) {
	const stream, id = "audit", 14
	c := startThree(t, stream, id, "--confirm-timeout", "1s")
	for i := 0; i < 10; i++ {
		c.mustPublish(stream, rec(i))
	}
	if _, err := c.commit(stream, "c1", 5); err != nil {
		t.Fatal(err)
	}
	for _, n := range three[1:] {
		c.waitCopy(n, stream, "caught up", func(cs wire.CopyStatus) bool { return cs.RecordTail == 10 && cs.CursorTail == 1 })
	}
	c.hosts["h2"].kill()
	c.hosts["h3"].kill()

	// The unconfirmed suffix: three records and a cursor event on h1 only.
	var wg sync.WaitGroup
	for i := 10; i < 13; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := c.publish(stream, []byte(fmt.Sprintf("lost-%d", i)), nil); r.err == nil || r.err.Code != wire.CodeConfirmTimeout {
				t.Errorf("publish %d with both followers dead: %v; want confirm_timeout", i, r)
			}
		}()
	}
	wg.Wait()
	if _, err := c.commit(stream, "c2", 10); err != nil {
		t.Fatal(err)
	}
	c.waitCopy("h1", stream, "suffix durable", func(cs wire.CopyStatus) bool { return cs.RecordTail == 13 && cs.CursorTail == 2 })
	c.hosts["h1"].kill()

	// The followers return (still following h1 at epoch 1), are sealed,
	// and h2 is promoted at epoch 2 with h3 following.
	c.start("h2")
	c.start("h3")
	for _, n := range []string{"h2", "h3"} {
		c.waitCopy(n, stream, "back as follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	}
	s2 := c.mustSeal("h2", stream, id, 2, 1)
	s3 := c.mustSeal("h3", stream, id, 2, 1)
	if s2.RecordTail != 10 || s3.RecordTail != 10 || s2.Digest != s3.Digest {
		t.Fatalf("sealed followers: %+v, %+v; want both at 10 with one digest", s2, s3)
	}
	starts := []wire.HistoryStart{{Epoch: 1, Node: "h1"}, {Epoch: 2, RecordTail: s2.RecordTail, CursorTail: s2.CursorTail, Node: "h2"}}
	c.assign(asg(stream, id, 2, "h2", []string{"h3"}, policy.MajorityDurable, starts...))
	c.waitCopy("h2", stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	for i := 10; i < 12; i++ {
		if pc := c.mustPublish(stream, rec(i)); pc.Offset != uint64(i) || pc.Epoch != 2 {
			t.Fatalf("publish on the new owner: %+v; want offset %d epoch 2", pc, i)
		}
	}
	if _, err := c.commit(stream, "c3", 12); err != nil {
		t.Fatal(err)
	}

	// The old owner returns; left out of the assignment it keeps its copy
	// as it is.
	c.start("h1")
	c.waitCopy("h1", stream, "left out, untouched", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleNone && cs.RecordTail == 13 && cs.Epoch == 1
	})
	// Placement adds it back as a follower at the same epoch.
	c.assign(asg(stream, id, 2, "h2", []string{"h3", "h1"}, policy.MajorityDurable, starts...))
	c.waitCopy("h1", stream, "cut and caught up", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleFollower && cs.Epoch == 2 && cs.RecordTail == 12 && cs.CursorTail == 2
	})
	if log := c.hosts["h1"].log(); !strings.Contains(log, "history cut") || !strings.Contains(log, "removed=3") {
		t.Fatal("h1's log does not show the cut of its 3-record suffix")
	}
	b, err := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, b, 0, 12)

	n2 := c.mustSeal("h2", stream, id, 3, 2)
	n1 := c.mustSeal("h1", stream, id, 3, 2)
	if n1.RecordTail != n2.RecordTail || n1.CursorTail != n2.CursorTail || n1.Digest != n2.Digest {
		t.Fatalf("returned copy %+v differs from the owner %+v", n1, n2)
	}
}

// TestGracefulLeave: on SIGTERM the owner stops taking publishes, sends a
// leaving heartbeat and node.leave, and exits 0.
func TestGracefulLeave(t *testing.T) {
	const stream, id = "jobs", 15
	httpAddr := freeAddr(t)
	c := newCluster(t)
	c.assign(asg(stream, id, 1, "h1", []string{"h2"}, policy.MajorityDurable))
	h1 := c.start("h1", "--http-addr", httpAddr)
	c.start("h2")
	c.waitCopy("h2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	c.waitCopy("h1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	if out, err := exec.Command(hostBin, "healthcheck", "--http-addr", httpAddr).CombinedOutput(); err != nil {
		t.Fatalf("healthcheck of a ready host: %v: %s", err, out)
	}
	for i := 0; i < 3; i++ {
		c.mustPublish(stream, rec(i))
	}

	// The owner moves away once the host leaves, as a coordinator would do.
	go func() {
		c.waitFor(10*time.Second, "node.leave", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.leaves) > 0
		})
		c.assign(asg(stream, id, 2, "h2", nil, policy.MajorityDurable, wire.HistoryStart{Epoch: 2, RecordTail: 3, Node: "h2"}))
	}()
	start := time.Now()
	if err := h1.term(10 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("graceful stop took %v although the streams moved away", el)
	}
	c.mu.Lock()
	leaves := append([]string(nil), c.leaves...)
	hb := c.hbs["h1"]
	c.mu.Unlock()
	if len(leaves) == 0 || leaves[0] != "h1" {
		t.Fatalf("node.leave requests %v; want one for h1", leaves)
	}
	if !hb.Leaving {
		t.Fatalf("last heartbeat of h1 %+v is not leaving", hb)
	}
	if out, err := exec.Command(hostBin, "healthcheck", "--http-addr", httpAddr).CombinedOutput(); err == nil {
		t.Fatalf("healthcheck of a stopped host passed: %s", out)
	}
	c.waitCopy("h2", stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	if pc := c.mustPublish(stream, rec(3)); pc.Offset != 3 || pc.Epoch != 2 {
		t.Fatalf("publish after the move: %+v", pc)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestCrashedOwnerSealsOnRestart: an owner SIGKILLed and started again on
// its data does not serve the epoch its crashed process began (followers
// may hold records it wrote but never synced); it seals its copy at the
// next epoch for a recovery to take over, and takes no publishes.
func TestCrashedOwnerSealsOnRestart(t *testing.T) {
	const stream, id = "crashed", 14
	c := startThree(t, stream, id)
	for i := 0; i < 8; i++ {
		c.mustPublish(stream, rec(i))
	}
	c.hosts["h1"].kill()
	c.start("h1")
	c.waitCopy("h1", stream, "sealed, no role", func(cs wire.CopyStatus) bool { return cs.Sealed && cs.Role == wire.RoleNone })
	if r := c.publish(stream, rec(8), nil); !errors.Is(r.nats, nats.ErrNoResponders) {
		t.Fatalf("publish to the restarted owner: %v; want no responders", r)
	}
	if !strings.Contains(c.hosts["h1"].log(), "copy sealed at the next epoch") {
		t.Fatal("h1's log does not say why it sealed its copy")
	}
}
