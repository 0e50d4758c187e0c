package host

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/dedupe"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// startPair starts n1 owning stream at epoch 1 with n2 following, on
// majority_durable with two copies (W = 2: every confirm needs n2).
func startPair(t *testing.T, stream string, id uint64, adjust func(*Config)) *miniCluster {
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}))
	c.start("n1", adjust)
	c.start("n2", adjust)
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", stream, "follower at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	return c
}

// TestLateSealAtCurrentEpochRefused: a recovery seals both copies at epoch
// 2 and the assignment of epoch 2 releases them; the same seal arriving
// again (late, or retried) is refused with stale_epoch on both, the copies
// stay unsealed, and the follower keeps replicating, so publishes that need
// it still confirm.
func TestLateSealAtCurrentEpochRefused(t *testing.T) {
	const stream, id = "late", 1
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ConfirmTimeout = 3 * time.Second })
	for i := range 3 {
		if pc := c.mustPublish(stream, payload(i)); pc.Offset != uint64(i) || pc.Copies != 2 {
			t.Fatalf("publish %d: %+v", i, pc)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if _, e := c.seal(n, stream, id, 2, 1); e != nil {
			t.Fatalf("seal %s at 2: %v", n, e)
		}
	}
	c.assign(assignment(stream, id, 2, "n1", []string{"n2"},
		wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: 3, Node: "n1"}))
	c.waitCopy("n1", stream, "owner at epoch 2, unsealed", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleOwner && cs.Epoch == 2 && !cs.Sealed
	})
	c.waitCopy("n2", stream, "follower at epoch 2, unsealed", func(cs wire.CopyStatus) bool {
		return cs.Role == wire.RoleFollower && cs.Epoch == 2 && !cs.Sealed
	})

	for _, n := range []string{"n2", "n1"} {
		for _, tr := range []uint64{1, 2} {
			if r, e := c.seal(n, stream, id, 2, tr); e == nil || e.Code != wire.CodeStaleEpoch {
				t.Fatalf("late seal of %s at the current epoch 2 (transition %d): reply %+v, error %v; want stale_epoch", n, tr, r, e)
			}
		}
		if _, sealed := c.hosts[n].h.store.Get(stream).SealInfo(); sealed {
			t.Fatalf("%s's copy is sealed after a refused seal", n)
		}
	}
	for i := 3; i < 6; i++ {
		pc, e := c.publish(stream, payload(i), "", 0)
		if e != nil || pc.Offset != uint64(i) || pc.Epoch != 2 || pc.Copies != 2 {
			t.Fatalf("publish %d after the late seal: %+v, %v; want offset %d at epoch 2 on 2 copies", i, pc, e, i)
		}
	}
	c.waitCopy("n2", stream, "follower holding record 5", func(cs wire.CopyStatus) bool { return cs.RecordTail == 6 && !cs.Sealed })
}

// TestFollowerWorkerEndedIsRestarted: a follower whose worker has ended
// (here: stopped behind the host's back, as a worker that died would be) is
// not taken as in line by the next apply of the same assignment; the apply
// starts it again and publishes that need the follower confirm.
func TestFollowerWorkerEndedIsRestarted(t *testing.T) {
	const stream, id = "ended", 2
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ConfirmTimeout = 3 * time.Second })
	c.mustPublish(stream, payload(0))

	r := c.hosts["n2"].h.lookupReplica(stream)
	r.mu.Lock()
	f := r.fol
	r.mu.Unlock()
	f.cancel()
	<-f.done

	// The same assignment again: applying it must restart the worker.
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}))
	c.hosts["n2"].log.waitFor(t, "follower worker had ended; starting it again")
	pc, e := c.publish(stream, payload(1), "", 0)
	if e != nil || pc.Offset != 1 || pc.Copies != 2 {
		t.Fatalf("publish after the follower worker ended: %+v, %v; want offset 1 on 2 copies", pc, e)
	}
}

// TestFollowerSealedUnderItAsksForAssignment: a worker whose writes fail
// with ErrSealed (a seal that did not come through the host's seal path)
// does not end silently: it asks for the assignment, whose apply finds the
// copy sealed past the assignment and stops the follower role, which the
// heartbeat shows.
func TestFollowerSealedUnderItAsksForAssignment(t *testing.T) {
	const stream, id = "sealedunder", 3
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ConfirmTimeout = time.Second })
	c.mustPublish(stream, payload(0))
	if _, err := c.hosts["n2"].h.store.Get(stream).Seal(3, 1); err != nil {
		t.Fatal(err)
	}
	// A record for the follower to apply; it cannot be confirmed.
	if _, e := c.publish(stream, payload(1), "", 0); e == nil || e.Code != wire.CodeConfirmTimeout {
		t.Fatalf("publish while the follower is sealed: %v; want confirm_timeout", e)
	}
	c.waitCopy("n2", stream, "sealed without a role after the apply the worker asked for", func(cs wire.CopyStatus) bool {
		return cs.Sealed && cs.Role == wire.RoleNone
	})
}

// TestDivergedFollowerAckNotCounted: a follower whose log differs from the
// owner's below its tail (same offsets, other records) is answered
// diverged: its ack is not counted, nothing is served to it, and a publish
// that needs it is not confirmed.
func TestDivergedFollowerAckNotCounted(t *testing.T) {
	const stream, id = "diverged", 4
	c := newMiniCluster(t)
	c.prepareCopy("n1", stream, id, 1, plain("a-0", "a-1", "a-2"))
	c.prepareCopy("n2", stream, id, 1, plain("b-0", "b-1", "b-2"))
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}))
	adjust := func(cfg *Config) { cfg.ConfirmTimeout = time.Second }
	n1 := c.start("n1", adjust)
	n2 := c.start("n2", adjust)
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	c.waitCopy("n2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	pc, e := c.publish(stream, payload(3), "", 0)
	if e == nil || e.Code != wire.CodeConfirmTimeout || e.Copies == nil || *e.Copies != 1 {
		t.Fatalf("publish needing a diverged follower: %+v, %v; want confirm_timeout held by 1 copy", pc, e)
	}
	n2.log.waitFor(t, "copy diverged from the owner below its tail")
	n1.log.waitFor(t, "follower's log diverged from the owner's")
	if tl := n2.h.store.Get(stream).Tails(); tl.Record != 3 {
		t.Fatalf("the diverged follower's record tail is %d; it was served records", tl.Record)
	}
	if cs, _ := find(n1.h.Heartbeat(false), stream); cs.Confirmed != 0 {
		t.Fatalf("owner confirmed %d with a diverged follower", cs.Confirmed)
	}
	if log := n2.log.String(); !strings.Contains(log, "follower_digest=") || !strings.Contains(log, "owner_reply=") {
		t.Fatalf("the follower's diverged log line lacks the digests:\n%s", log)
	}
}

// TestReplRequestOnAnotherNodesSubjectRefused: a replication request
// whose body names n2 but that was sent on n3's subject (a host acking for
// another) is refused with bad_request, logged once, and not counted: the
// publish waiting for a second copy stays unconfirmed. The same request on
// n2's own subject is counted and confirms it.
func TestReplRequestOnAnotherNodesSubjectRefused(t *testing.T) {
	const stream, id = "misnamed", 12
	c, n1 := startOwnerAlone(t, stream, id)

	type result struct {
		pc *wire.PublishConfirm
		e  *wire.Error
	}
	done := make(chan result, 1)
	go func() {
		pc, e := c.publish(stream, payload(0), "", 0)
		done <- result{pc, e}
	}()
	owned := n1.h.store.Get(stream)
	for owned.Tails().Record < 1 {
		time.Sleep(time.Millisecond)
	}
	digest, err := owned.DigestAt(1)
	if err != nil {
		t.Fatal(err)
	}
	ack := frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: id,
		RecordTail: 1, CursorTail: owned.Tails().CursorDurable, TailDigest: digest})
	for range 3 {
		resp, err := c.nc.Request(wire.ReplicationSubject(stream, 1, "n3"), ack, 5*time.Second)
		if err != nil {
			t.Fatalf("request on n3's subject: %v", err)
		}
		if e := replyError(resp); e == nil || e.Code != wire.CodeBadRequest {
			t.Fatalf("request naming n2 on n3's subject answered %v (%q); want bad_request", e, resp.Data)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("publish answered %+v, %v after a request on another node's subject", r.pc, r.e)
	case <-time.After(200 * time.Millisecond):
	}
	if cs, _ := find(n1.h.Heartbeat(false), stream); cs.Confirmed != 0 {
		t.Fatalf("owner confirmed %d from a request on another node's subject", cs.Confirmed)
	}
	const line = "replication request names another node than its sender"
	n1.log.waitFor(t, line)
	if log := n1.log.String(); strings.Count(log, line) != 1 || !strings.Contains(log, "sender=n3 body_node=n2") {
		t.Fatalf("want the refusal logged once, naming both nodes:\n%s", log)
	}

	resp, err := c.nc.Request(wire.ReplicationSubject(stream, 1, "n2"), ack, 5*time.Second)
	if err != nil {
		t.Fatalf("request on n2's subject: %v", err)
	}
	if e := replyError(resp); e != nil {
		t.Fatalf("request naming n2 on n2's subject refused: %v", e)
	}
	select {
	case r := <-done:
		if r.e != nil || r.pc.Offset != 0 || r.pc.Copies != 2 {
			t.Fatalf("publish %+v, %v; want offset 0 confirmed on 2 copies", r.pc, r.e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the publish was not confirmed by n2's ack on its own subject")
	}
}

// TestResetFollowerMatchesOwnerDigest: a follower that starts behind the
// owner's retained head is reset to the head with the owner's digest there,
// so its later requests pass the log matching check and its acks count.
func TestResetFollowerMatchesOwnerDigest(t *testing.T) {
	const stream, id = "reset", 5
	c, n1, n2, adjust := startTrimmed(t, stream, id)
	owned := n1.h.store.Get(stream)
	n3 := c.start("n3", adjust)
	c.waitCopy("n3", stream, "reset and caught up", func(cs wire.CopyStatus) bool { return cs.RecordTail == 20 })
	n3.log.waitFor(t, "behind the owner's head; resetting the copy")
	// Only n3 can confirm now.
	n2.stop()
	pc, e := c.publish(stream, payload(20), "", 0)
	if e != nil || pc.Offset != 20 || pc.Copies != 2 {
		t.Fatalf("publish confirmed by the reset follower: %+v, %v; want offset 20 on 2 copies", pc, e)
	}
	c.waitCopy("n3", stream, "record 20", func(cs wire.CopyStatus) bool { return cs.RecordTail == 21 })
	if got, want := n3.h.store.Get(stream).Digest(), owned.Digest(); got != want {
		t.Fatalf("reset follower's digest %s, owner's %s", got, want)
	}
	if strings.Contains(n3.log.String(), "diverged") {
		t.Fatalf("the reset follower was found diverged:\n%s", n3.log.String())
	}
}

// TestDedupeRebuiltOnPromotion: an owner rebuilds its duplicate window from
// the producer ids and sequences stored with its newest records, within
// its bounds (records on n1, bytes on n2); a retry inside them is answered
// with the first write's offset, one outside is written again. Fetches get
// the payload without the envelope.
func TestDedupeRebuiltOnPromotion(t *testing.T) {
	c := newMiniCluster(t)
	var stored [][]byte
	for seq := range 10 {
		stored = append(stored, envelope.Append(nil, "p", uint64(seq), bytes.Repeat([]byte{byte('a' + seq)}, 100)))
	}
	stored = append(stored, envelope.Append(nil, "", 0, []byte("plain")))
	c.prepareCopy("n1", "byrecords", 6, 1, stored)
	c.prepareCopy("n2", "bybytes", 7, 1, stored[:10])
	a1 := assignment("byrecords", 6, 2, "n1", nil)
	a2 := assignment("bybytes", 7, 2, "n2", nil)
	c.assign(a1, a2)
	// Offsets 6..10 on n1; on n2 the newest two records of 104 bytes each.
	c.start("n1", func(cfg *Config) { cfg.DedupeRebuildRecords = 5 })
	c.start("n2", func(cfg *Config) { cfg.DedupeRebuildBytes = 2 * 104 })
	c.waitCopy("n1", "byrecords", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	c.waitCopy("n2", "bybytes", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })

	check := func(stream string, seq, wantOff uint64, wantDup bool) {
		t.Helper()
		pc, e := c.publish(stream, []byte(fmt.Sprintf("retry-%d", seq)), "p", seq)
		if e != nil || pc.Offset != wantOff || pc.Duplicate != wantDup {
			t.Fatalf("%s: retry of p/%d: %+v, %v; want offset %d duplicate %v", stream, seq, pc, e, wantOff, wantDup)
		}
	}
	check("byrecords", 9, 9, true)
	check("byrecords", 6, 6, true)
	check("byrecords", 5, 11, false) // outside the last 5 records
	check("bybytes", 9, 9, true)
	check("bybytes", 8, 8, true)
	check("bybytes", 7, 10, false) // outside the last 208 bytes

	b := c.fetch("byrecords", wire.FetchRequest{Start: "earliest"})
	if len(b.Records) != 12 {
		t.Fatalf("fetched %d records, want 12", len(b.Records))
	}
	if got := b.Records[0].Data; !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 100)) {
		t.Fatalf("record 0 fetched as %q, want the payload without its envelope", got)
	}
	if got := b.Records[10].Data; string(got) != "plain" {
		t.Fatalf("record 10 fetched as %q, want %q", got, "plain")
	}
	if got := b.Records[11].Data; string(got) != "retry-5" {
		t.Fatalf("record 11 fetched as %q, want %q", got, "retry-5")
	}
	// The stored form keeps the producer: it replicates with the record.
	recs, err := c.hosts["n1"].h.store.Get("byrecords").Read(11, 1, 0, 12)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read stored record 11: %v %d", err, len(recs))
	}
	if env, err := envelope.Decode(recs[0].Data); err != nil || env.Producer != "p" || env.Seq != 5 || string(env.Payload) != "retry-5" {
		t.Fatalf("stored record 11 decodes as %+v, %v", env, err)
	}
}

// TestDedupeWindowPrebuiltAtSeal: a seal of a copy without a window of its
// own (here, prepared before its host started) starts building one from
// the sealed log, and the promotion that follows takes it instead of
// reading the log again; retries are answered as by a window built at the
// promotion.
func TestDedupeWindowPrebuiltAtSeal(t *testing.T) {
	c := newMiniCluster(t)
	var stored [][]byte
	for seq := range 10 {
		stored = append(stored, envelope.Append(nil, "p", uint64(seq), []byte(fmt.Sprintf("record-%d", seq))))
	}
	c.prepareCopy("n1", "pre", 8, 1, stored)
	// A follower of an owner that is gone, whose copy (prepared before
	// the host started) has no window of its own.
	c.assign(assignment("pre", 8, 1, "n9", []string{"n1"}))
	n1 := c.start("n1", nil)
	c.waitCopy("n1", "pre", "follower at 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	if _, e := c.seal("n1", "pre", 8, 2, 1); e != nil {
		t.Fatalf("seal: %v", e)
	}
	c.assign(assignment("pre", 8, 2, "n1", nil))
	c.waitCopy("n1", "pre", "owner at 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	log := n1.log.String()
	if !strings.Contains(log, "duplicate window taken from the seal's prebuild") {
		t.Fatalf("the promotion did not take the prebuilt window:\n%s", log)
	}
	for _, seq := range []uint64{9, 0} {
		pc, e := c.publish("pre", []byte("retry"), "p", seq)
		if e != nil || pc.Offset != seq || !pc.Duplicate {
			t.Fatalf("retry of p/%d: %+v, %v; want its first offset, duplicate", seq, pc, e)
		}
	}
	if pc, e := c.publish("pre", []byte("new"), "p", 10); e != nil || pc.Offset != 10 || pc.Duplicate {
		t.Fatalf("new p/10: %+v, %v; want offset 10, not a duplicate", pc, e)
	}
}

// A prebuilt window counts only for the copy and the log it was built
// from: another tail or digest, or another copy, gets none.
func TestPrebuiltWindowOnlyForItsLog(t *testing.T) {
	var a, b streamlog.Copy
	p := &prebuilt{c: &a, tail: 10, digest: 7, done: make(chan struct{}), w: dedupe.New(1, 1)}
	close(p.done)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		c    *streamlog.Copy
		t    streamlog.Tails
		want bool
	}{
		"same log":     {&a, streamlog.Tails{Record: 10, RecordDigest: 7}, true},
		"longer log":   {&a, streamlog.Tails{Record: 11, RecordDigest: 7}, false},
		"other digest": {&a, streamlog.Tails{Record: 10, RecordDigest: 8}, false},
		"other copy":   {&b, streamlog.Tails{Record: 10, RecordDigest: 7}, false},
	} {
		if got := p.take(ctx, tc.c, tc.t) != nil; got != tc.want {
			t.Errorf("%s: window taken %v, want %v", name, got, tc.want)
		}
	}
	var none *prebuilt
	if none.take(ctx, &a, streamlog.Tails{}) != nil {
		t.Error("a nil prebuild gave a window")
	}
}

// TestFollowerKeepsTheDuplicateWindow: a follower records the producer
// sequences of what it applies, so when it is promoted after a seal it
// neither reads its log nor waits for a prebuild: retries of records the
// old owner wrote are answered with their first offsets, and a new
// sequence is written.
func TestFollowerKeepsTheDuplicateWindow(t *testing.T) {
	c := newMiniCluster(t)
	const stream = "kept"
	c.assign(assignment(stream, 9, 1, "n1", []string{"n2"}))
	c.start("n1", nil)
	n2 := c.start("n2", nil)
	c.waitCopy("n1", stream, "owner at 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	c.waitCopy("n2", stream, "follower at 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 1 })
	for seq := range 20 {
		if pc, e := c.publish(stream, payload(seq), "p", uint64(seq)); e != nil || pc.Offset != uint64(seq) {
			t.Fatalf("publish p/%d: %+v, %v", seq, pc, e)
		}
	}
	c.waitCopy("n2", stream, "all 20 records", func(cs wire.CopyStatus) bool { return cs.RecordTail == 20 })
	c.hosts["n1"].stop()
	if _, e := c.seal("n2", stream, 9, 2, 1); e != nil {
		t.Fatalf("seal: %v", e)
	}
	c.assign(assignment(stream, 9, 2, "n2", nil, wire.HistoryStart{Epoch: 2, RecordTail: 20, Node: "n2"}))
	c.waitCopy("n2", stream, "owner at 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	log := n2.log.String()
	if !strings.Contains(log, "duplicate window kept from the copy's earlier roles") {
		t.Fatalf("the promotion did not keep the follower's window:\n%s", log)
	}
	for _, bad := range []string{"duplicate window rebuilt from the log", "duplicate window prebuilt from the sealed log"} {
		if strings.Contains(log, bad) {
			t.Fatalf("the promotion read the log (%q):\n%s", bad, log)
		}
	}
	for _, seq := range []uint64{19, 3} {
		pc, e := c.publish(stream, []byte("retry"), "p", seq)
		if e != nil || pc.Offset != seq || !pc.Duplicate {
			t.Fatalf("retry of p/%d at the new owner: %+v, %v; want offset %d, duplicate", seq, pc, e, seq)
		}
	}
	if pc, e := c.publish(stream, []byte("new"), "p", 20); e != nil || pc.Offset != 20 || pc.Duplicate {
		t.Fatalf("new p/20: %+v, %v; want offset 20", pc, e)
	}
}

// startTrimmed starts n1 owning stream (copies n1, n2, n3; retention of 5
// records) and its follower n2, publishes 20 records and waits until the
// owner's retention moved its head to 15. n3 is not started; adjust is the
// hosts' configuration, for starting it.
func startTrimmed(t *testing.T, stream string, id uint64) (c *miniCluster, n1, n2 *testHost, adjust func(*Config)) {
	t.Helper()
	c = newMiniCluster(t)
	as := assignment(stream, id, 1, "n1", []string{"n2", "n3"})
	as.Retention = wire.Retention{MaxRecords: 5}
	c.assign(as)
	adjust = func(cfg *Config) {
		cfg.ConfirmTimeout = 3 * time.Second
		cfg.RetentionInterval = 20 * time.Millisecond
	}
	n1 = c.start("n1", adjust)
	n2 = c.start("n2", adjust)
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	c.waitCopy("n2", stream, "follower", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower })
	for i := range 20 {
		c.mustPublish(stream, payload(i))
	}
	owned := n1.h.store.Get(stream)
	deadline := time.After(10 * time.Second)
	for owned.Tails().Head < 15 {
		select {
		case <-owned.Changed():
		case <-deadline:
			t.Fatalf("owner head %d, want 15", owned.Tails().Head)
		}
	}
	return c, n1, n2, adjust
}

// TestQuietCopyBehindTheHeadCatchesUpAtOnce: a quiet copy (a new process)
// whose first request finds it behind the owner's retained head resets to
// the head and asks for the records past it at once. Review of the quiet
// copy's sleep after an empty answer: the reset's empty answer put it to
// sleep naming the head, past the ack the owner had counted for it, which
// the owner took for an ack on its way and left asleep for ackInFlightWait
// (caught up after 1.06 s instead of 0.06 s).
func TestQuietCopyBehindTheHeadCatchesUpAtOnce(t *testing.T) {
	const stream, id = "behindhead", 41
	c, n1, _, adjust := startTrimmed(t, stream, id)
	// n3 acked a few records long ago (then went away): the owner counted
	// that ack, below the head.
	o := n1.h.ownedIDs.get(id)
	func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.mu.conf.acked("n3", 3, 0, time.Now().Add(-time.Minute))
	}()
	began := time.Now()
	c.start("n3", adjust)
	c.waitCopy("n3", stream, "caught up", func(cs wire.CopyStatus) bool { return cs.RecordTail == 20 })
	if took := time.Since(began); took >= ackInFlightWait/2 {
		t.Fatalf("a copy behind the owner's head caught up %v after its start; want at once, not after the owner's wait for an ack (%v)", took, ackInFlightWait)
	}
}
