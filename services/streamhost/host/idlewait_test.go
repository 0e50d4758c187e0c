package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/streamhost/envelope"
)

// idleTestWait is the idle wait of the tests below: short enough for a
// test, long enough that a copy polling on its own would show in a window
// of a few of them.
const idleTestWait = 2 * time.Second

// idleCluster starts n1, n2 and n3 with short replication waits and
// streams owned by n1 and followed by n2 and n3 (W = 2), each with one
// record confirmed and held by both followers.
func idleCluster(t *testing.T, streams int) (*miniCluster, []string) {
	t.Helper()
	return idleClusterWith(t, streams, idleTestWait)
}

// idleClusterWith is idleCluster with the hosts' idle wait idle.
func idleClusterWith(t *testing.T, streams int, idle time.Duration) (*miniCluster, []string) {
	t.Helper()
	c := newMiniCluster(t)
	var names []string
	var as []wire.AssignedStream
	for i := range streams {
		name := fmt.Sprintf("idle%d", i)
		names = append(names, name)
		as = append(as, assignment(name, uint64(100+i), 1, "n1", []string{"n2", "n3"}))
	}
	c.assign(as...)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, func(cfg *Config) {
			cfg.ReplWait = 50 * time.Millisecond
			cfg.ReplIdleWait = idle
		})
	}
	for _, s := range names {
		c.waitCopy("n1", s, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
		c.mustPublish(s, payload(0))
	}
	// Both followers hold it (one follower's ack confirmed it): a copy
	// asleep before the record came (quiet) gets it by a host wake, which
	// may come after the confirm.
	for _, s := range names {
		for _, n := range []string{"n2", "n3"} {
			c.waitCopy(n, s, "the first record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 1 })
		}
	}
	return c, names
}

// idleCopiesOf counts h's follower copies asleep on owner's host wait.
func idleCopiesOf(h *Host, owner string) int {
	h.idle.mu.Lock()
	defer h.idle.mu.Unlock()
	if p := h.idle.peers[owner]; p != nil {
		return len(p.copies)
	}
	return 0
}

// waitIdle waits until n2 and n3 each have want copies asleep on n1.
func waitIdle(t *testing.T, c *miniCluster, want int) {
	t.Helper()
	// A copy goes idle after its doubling waits and a whole idle wait
	// (about 2.6 idle waits from a record), slower under load.
	deadline := time.Now().Add(10 * idleTestWait)
	for _, n := range []string{"n2", "n3"} {
		for idleCopiesOf(c.hosts[n].h, "n1") != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s has %d copies asleep on n1, want %d", n, idleCopiesOf(c.hosts[n].h, "n1"), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// countSubject counts the messages on subject seen by the test's
// connection.
func countSubject(t *testing.T, nc *nats.Conn, subject string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestIdleFollowersSendNoPerCopyRequests: idle follower copies send no
// request of their own while idle, only one host wait per pair of hosts
// per idle wait, and a publish after a long idle is confirmed well within
// the idle wait: the owner host answers the parked host wait on the
// append. Before the host waits every idle copy asked on its own
// replication subject once per idle wait.
func TestIdleFollowersSendNoPerCopyRequests(t *testing.T) {
	const streams = 20
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	perCopy := countSubject(t, c.nc, "brook.s.*.repl.>")
	hostWaits := countSubject(t, c.nc, "brook.hostrepl.>")

	window := idleTestWait * 3 / 2
	time.Sleep(window)
	if n := perCopy.Load(); n != 0 {
		t.Fatalf("%d per-copy replication requests in %v of idle from %d idle follower copies; want none", n, window, 2*streams)
	}
	// Two follower hosts, one host wait each per idle wait (and the one
	// in flight at the start).
	if n := hostWaits.Load(); n < 1 || n > 2*(int64(window/idleTestWait)+2) {
		t.Fatalf("%d host waits in %v, want 1 to %d", n, window, 2*(int64(window/idleTestWait)+2))
	}

	// A publish after the idle is confirmed by a follower at once (W = 2).
	for _, s := range []string{names[0], names[streams-1]} {
		began := time.Now()
		pc := c.mustPublish(s, payload(1))
		took := time.Since(began)
		if pc.Offset != 1 || pc.Copies < 2 {
			t.Fatalf("publish to %s: %+v", s, pc)
		}
		if took >= idleTestWait/4 {
			t.Fatalf("publish to idle %s confirmed in %v, not well within the idle wait %v", s, took, idleTestWait)
		}
	}
	// The copies that woke go back to sleep once they have the record.
	waitIdle(t, c, streams)
}

// largeRecord is a record over what a host wake carries for one copy.
func largeRecord() []byte { return bytes.Repeat([]byte("x"), hostWakeCopyBytes+1) }

// keepAwake makes the follower copies on n2 and n3 of streams busy:
// records arrive to them three times within an idle wait (each too large
// for a wake, so that they ask on their own), and they keep their own long
// poll until its empty waits reach the idle wait. One record to every
// stream a round, so that the copies are all awake at once.
func keepAwake(t *testing.T, c *miniCluster, streams ...string) {
	t.Helper()
	for range 3 {
		tails := map[string]uint64{}
		for _, s := range streams {
			tails[s] = c.mustPublish(s, largeRecord()).Offset + 1
		}
		for _, s := range streams {
			for _, n := range []string{"n2", "n3"} {
				c.waitCopy(n, s, "the large record", func(cs wire.CopyStatus) bool { return cs.RecordTail >= tails[s] })
			}
		}
	}
}

// replRequests counts, on the per-copy replication subjects, requests
// (with a reply subject) and standalone acks (without).
func replRequests(t *testing.T, nc *nats.Conn) (requests, acks *atomic.Int64) {
	t.Helper()
	requests, acks = new(atomic.Int64), new(atomic.Int64)
	sub, err := nc.Subscribe("brook.s.*.repl.>", func(m *nats.Msg) {
		if m.Reply != "" {
			requests.Add(1)
		} else {
			acks.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return requests, acks
}

// TestIdleFollowersGetRecordsInTheHostWake: a publish to an idle stream
// reaches its asleep follower copies in the owner host's answer to their
// host wait; each applies it, acks it with one standalone ack, and sleeps
// again at once: no request of its own, and no long polls before it
// sleeps. Before the wake carried records every woken copy asked for them,
// got them, acked, and long-polled with a doubling wait until one of a
// whole idle wait came back empty: here (50 ms doubling to 2 s) six
// requests per copy over about 4 s. A record too large for the wake still
// wakes its copies to ask on their own.
func TestIdleFollowersGetRecordsInTheHostWake(t *testing.T) {
	const streams = 4
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	// Idle for an idle wait: a copy woken sooner is on a stream written
	// again soon, which keeps its own long poll.
	time.Sleep(idleTestWait)
	requests, acks := replRequests(t, c.nc)
	for i, s := range names {
		pc := c.mustPublish(s, payload(1+i))
		if pc.Offset != 1 || pc.Copies < 2 {
			t.Fatalf("publish to %s: %+v", s, pc)
		}
	}
	// Both copies of every stream hold the record and are asleep again.
	for _, s := range names {
		for _, n := range []string{"n2", "n3"} {
			c.waitCopy(n, s, "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 2 })
		}
	}
	waitIdle(t, c, streams)
	// Long enough for the long polls of a woken copy to show.
	time.Sleep(idleTestWait)
	// A copy whose next host wait reaches the owner before its standalone
	// ack is counted is woken to ask on its own, once: rare, and harmless.
	if n := requests.Load(); n > 2 {
		t.Fatalf("%d per-copy requests for one record to each of %d idle streams; want none (the host wake carries it), or a stray one or two", n, streams)
	}
	if n := acks.Load(); n < 2*streams || n > 4*streams {
		t.Fatalf("%d standalone acks for one record to each of %d idle streams' 2 followers; want about one each", n, streams)
	}
	waitIdle(t, c, streams)

	// A record over what a wake carries for a copy: woken, it asks.
	c.mustPublish(names[0], largeRecord())
	for _, n := range []string{"n2", "n3"} {
		c.waitCopy(n, names[0], "the large record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 3 })
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d per-copy requests for a record too large for the wake; want its 2 copies to ask", n)
	}
}

// TestStreamWrittenAgainSoonGoesBackToItsOwnLongPoll: a stream whose
// copies slept and that is then written every few milliseconds gets its
// copies back on their own long poll after the first record or two: a
// copy woken with records sleeps again at once only after a whole idle
// wait asleep. Review of the records in the wake: every woken copy slept
// again at once, so a busy stream that had slept once stayed on the host
// waits for good, one host wait round per record per follower host (358
// host waits in 200 publishes, the confirm's p50 15 ms instead of 1.3).
func TestStreamWrittenAgainSoonGoesBackToItsOwnLongPoll(t *testing.T) {
	c, names := idleCluster(t, 1)
	waitIdle(t, c, 1)
	for i := range 10 {
		c.mustPublish(names[0], payload(1+i))
		time.Sleep(5 * time.Millisecond)
	}
	hostWaits := countSubject(t, c.nc, "brook.hostrepl.>")
	requests, _ := replRequests(t, c.nc)
	const publishes = 50
	for i := range publishes {
		c.mustPublish(names[0], payload(11+i))
		time.Sleep(5 * time.Millisecond)
	}
	if n := hostWaits.Load(); n > 4 {
		t.Fatalf("%d host waits during %d publishes 5 ms apart, after the first ten; want its copies on their own long poll (a few at most)", n, publishes)
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d per-copy requests during %d publishes 5 ms apart; want the copies asking on their own", n, publishes)
	}
	for _, n := range []string{"n2", "n3"} {
		if k := idleCopiesOf(c.hosts[n].h, "n1"); k != 0 {
			t.Fatalf("%s: %d copies asleep on a stream written every 5 ms", n, k)
		}
	}
}

// TestCopyJustAsleepAfterItsLongPollsTakesRecordsInTheWake: a copy that
// has just gone to sleep after its own long polls (a whole idle wait of
// them came back empty, several seconds after its last records) and is
// then woken with records sleeps again at once: the stream is idle by the
// same rule that put it to sleep. Second review: the rule counted the
// time asleep, not the time since the last records, so a stream written a
// little more rarely than its copies take to fall asleep (here 5 s, 7.5 s
// at the defaults) never had its records carried by the wake: every
// record woke the copies to their own long polls again.
func TestCopyJustAsleepAfterItsLongPollsTakesRecordsInTheWake(t *testing.T) {
	c, names := idleCluster(t, 1)
	waitIdle(t, c, 1)
	// Records too large for the wake, three: the copies ask for them,
	// long-poll and fall asleep again a whole idle wait of empty polls
	// later.
	keepAwake(t, c, names[0])
	waitIdle(t, c, 0)
	waitIdle(t, c, 1)
	requests, _ := replRequests(t, c.nc)
	c.mustPublish(names[0], payload(2))
	for _, n := range []string{"n2", "n3"} {
		c.waitCopy(n, names[0], "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 5 })
	}
	time.Sleep(idleTestWait / 2)
	// A copy whose next host wait beats its ack to the owner asks once.
	if n := requests.Load(); n > 1 {
		t.Fatalf("%d per-copy requests for a record to a stream whose copies had just fallen asleep; want none (the wake carries it)", n)
	}
	waitIdle(t, c, 1)
}

// TestWokenCopyAppliesOnlyRecordsOfItsEpoch: records a host wake carries
// for a copy are applied only if they are of the epoch the copy follows
// and start at its written tail; others (here: an earlier epoch's, which
// the store alone would take, since they start at the copy's tail) leave
// the copy as it was, and it asks on its own. An earlier epoch's records
// may be ones a recovery cut: a follower holding them could ack a log
// that is not its owner's.
func TestWokenCopyAppliesOnlyRecordsOfItsEpoch(t *testing.T) {
	const stream, id = "woken", 7
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 2, "n1", []string{"n2"}))
	// n1 stands in for the owner at epoch 2 with nothing to send, and
	// answers the first host wait with records of epoch 1.
	var requests atomic.Int64
	repl, err := c.nc.Subscribe(wire.ReplicationWildcard(stream, 2), func(m *nats.Msg) {
		if m.Reply != "" {
			requests.Add(1)
			_ = m.Respond(frame.AppendBatch(nil, &frame.Batch{Epoch: 2}))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = repl.Unsubscribe() }()
	woke := make(chan struct{})
	var once atomic.Bool
	hw, err := c.nc.Subscribe(wire.HostReplSubject("n1", "n2"), func(m *nats.Msg) {
		if once.Swap(true) {
			return // later host waits go unanswered
		}
		_ = m.Respond(frame.AppendHostWake(nil, &frame.HostWake{Batches: []frame.HostWakeBatch{{StreamID: id,
			Batch: &frame.Batch{Epoch: 1, Tail: 1, Next: 1, Records: []frame.Record{{Offset: 0, Data: envelope.Append(nil, "", 0, []byte("cut"))}}}}}}))
		close(woke)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hw.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n2 := c.start("n2", func(cfg *Config) {
		cfg.ReplWait = 50 * time.Millisecond
		cfg.ReplIdleWait = 200 * time.Millisecond
	})
	select {
	case <-woke:
	case <-time.After(time.Minute):
		t.Fatal("the copy never slept on a host wait")
	}
	asked := requests.Load()
	deadline := time.Now().Add(30 * time.Second)
	for requests.Load() == asked {
		if time.Now().After(deadline) {
			t.Fatal("the copy did not ask on its own after a wake with records it could not apply")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tl := n2.h.store.Get(stream).Tails(); tl.RecordWritten != 0 {
		t.Fatalf("copy at epoch 2 holds %d records after a wake with an epoch 1 record; want none", tl.RecordWritten)
	}
}

// TestHostWakeCarriesRecordsOnlyWhenAsked: the owner host puts records
// into its wake only for a host wait with frame.HeaderWakeRecords; one
// without it (a follower host of a release before records in the wake,
// whose decoder knows only the wake of stream ids) gets the stream id of
// the same copy, to ask on its own.
func TestHostWakeCarriesRecordsOnlyWhenAsked(t *testing.T) {
	c, names := idleCluster(t, 1)
	waitIdle(t, c, 1)
	// n2 acked the first record and stops; n3 confirms the second.
	c.hosts["n2"].stop()
	c.mustPublish(names[0], payload(1))
	ask := func(records bool) *frame.HostWake {
		t.Helper()
		msg := nats.NewMsg(wire.HostReplSubject("n1", "n2"))
		if records {
			msg.Header.Set(frame.HeaderWakeRecords, "1")
		}
		msg.Data = frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 1000,
			Copies: []frame.HostWaitCopy{{StreamID: 100, Epoch: 1, RecordTail: 1}}})
		resp, err := c.nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		w, err := frame.DecodeHostWake(resp.Data)
		if err != nil {
			t.Fatalf("host wake: %v (error header %q)", err, resp.Header.Get(frame.HeaderError))
		}
		return w
	}
	if w := ask(false); len(w.Batches) != 0 || fmt.Sprint(w.StreamIDs) != "[100]" {
		t.Fatalf("host wait without the header: woken %v with %d batches, want stream 100 and no records", w.StreamIDs, len(w.Batches))
	}
	w := ask(true)
	if len(w.StreamIDs) != 0 || len(w.Batches) != 1 || w.Batches[0].StreamID != 100 {
		t.Fatalf("host wait with the header: woken %v, batches %+v; want the records of stream 100", w.StreamIDs, w.Batches)
	}
	b := w.Batches[0].Batch
	if b.Epoch != 1 || b.Next != 2 || len(b.Records) != 1 || b.Records[0].Offset != 1 || !bytes.HasSuffix(b.Records[0].Data, payload(1)) {
		t.Fatalf("batch %+v, want record 1 (enveloped %q) at epoch 1", b, payload(1))
	}
}

// TestHostWakeRecordsWithinTheLimit: the records a wake carries, with
// every entry's and record's encoding, fit the limit given; the copies
// whose records do not fit are named to ask on their own. Review: the
// budget counted the records' data and 12 bytes a record, not the
// entries' batch headers, so a wake could exceed it by tens of bytes a
// copy.
func TestHostWakeRecordsWithinTheLimit(t *testing.T) {
	const streams = 6
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	c.hosts["n2"].stop()
	// Small records: what the entries take besides the data matters.
	for _, s := range names {
		for i := range 3 {
			c.mustPublish(s, []byte{byte('a' + i)})
		}
	}
	req := &frame.HostWait{Node: "n2"}
	fetch := make([]int, streams)
	for i := range streams {
		req.Copies = append(req.Copies, frame.HostWaitCopy{StreamID: uint64(100 + i), Epoch: 1, RecordTail: 1})
		fetch[i] = i
	}
	owners := c.hosts["n1"].h.ownedIDs.getCopies(req.Copies, nil)
	for _, limit := range []int{200, 10000} {
		wake := &frame.HostWake{}
		hostWakeRecords(wake, req, owners, fetch, limit)
		records := len(frame.AppendHostWake(nil, wake)) - len(frame.AppendHostWake(nil, &frame.HostWake{StreamIDs: wake.StreamIDs}))
		t.Logf("limit %d: %d copies' records in %d bytes, %d copies named", limit, len(wake.Batches), records, len(wake.StreamIDs))
		if records > limit {
			t.Fatalf("limit %d: the records took %d bytes of the wake", limit, records)
		}
		if len(wake.Batches) == 0 || len(wake.Batches)+len(wake.StreamIDs) != streams {
			t.Fatalf("limit %d: %d copies with records and %d named, want some with records and every copy in one or the other", limit, len(wake.Batches), len(wake.StreamIDs))
		}
		for _, b := range wake.Batches {
			// The last copy's may be cut short (it gets the rest later).
			if n := len(b.Batch.Records); n == 0 || n > 3 || b.Batch.Records[0].Offset != 1 || b.Batch.Next != 1+uint64(n) {
				t.Fatalf("limit %d: stream %d: batch %+v, want up to the 3 records from 1", limit, b.StreamID, b.Batch)
			}
		}
		if limit == 10000 && len(wake.StreamIDs) != 0 {
			t.Fatalf("limit %d: %d copies named; want every copy's records in the wake", limit, len(wake.StreamIDs))
		}
	}
}

// TestIdleFollowersWakeWhenTheOwnerHostGoes: when the owner host's NATS
// connection dies while its followers sleep on host waits, the failed host
// waits wake every copy, which ask on their own as before (and so notice
// the owner's loss), and a promotion at a new epoch serves publishes.
func TestIdleFollowersWakeWhenTheOwnerHostGoes(t *testing.T) {
	const streams = 5
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	perCopy := countSubject(t, c.nc, "brook.s.*.repl.1.*")

	c.hosts["n1"].h.nc.Close()
	// The host wait in flight fails at the latest after the idle wait and
	// the slack; the copies then ask on their own.
	deadline := time.Now().Add(replTimeout(idleTestWait) + 5*time.Second)
	for idleCopiesOf(c.hosts["n2"].h, "n1")+idleCopiesOf(c.hosts["n3"].h, "n1") > 0 || perCopy.Load() < 2*streams {
		if time.Now().After(deadline) {
			t.Fatalf("copies still asleep on the dead owner: n2 %d, n3 %d; %d per-copy requests since",
				idleCopiesOf(c.hosts["n2"].h, "n1"), idleCopiesOf(c.hosts["n3"].h, "n1"), perCopy.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	var as []wire.AssignedStream
	for i, s := range names {
		as = append(as, assignment(s, uint64(100+i), 2, "n2", []string{"n3"},
			wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: 1, Node: "n2"}))
	}
	c.assign(as...)
	for _, s := range names {
		c.waitCopy("n2", s, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
		if pc := c.mustPublish(s, payload(1)); pc.Epoch != 2 || pc.Offset != 1 || pc.Copies < 2 {
			t.Fatalf("publish to %s after the promotion: %+v", s, pc)
		}
	}
}

// TestLateHostWaitWakesNoCopy: a host wait the owner host leaves
// unanswered past its wait and the slack (a slow owner host or NATS) is
// sent again for the same copies, which sleep on; an owner host that is
// gone (no responders) wakes them. Before, the first late answer woke
// every copy, which then asked on its own: in a mass failover every idle
// copy of every host at once, and the storm of per-copy requests kept
// the latency that had made the host waits late (issue 17).
func TestLateHostWaitWakesNoCopy(t *testing.T) {
	c := newMiniCluster(t)
	n2 := c.start("n2", func(cfg *Config) { cfg.ReplIdleWait = 100 * time.Millisecond }).h
	// n1 stands in for an owner host that hears the host waits and is too
	// slow to answer any.
	waits := make(chan *frame.HostWait, 16)
	owner, err := c.nc.Subscribe(wire.HostReplSubject("n1", "n2"), func(m *nats.Msg) {
		if req, err := frame.DecodeHostWait(m.Data); err == nil {
			waits <- req
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	const copies = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan uint64, copies)
	for i := range copies {
		id := uint64(100 + i)
		go func() {
			if _, ok := n2.sleepIdle(ctx, "n1", frame.HostWaitCopy{StreamID: id, Epoch: 1, RecordTail: 1}); ok {
				woke <- id
			}
		}()
	}
	// The host wait naming every copy, then what follows it: a host wait
	// again (it went unanswered), not a copy woken.
	for {
		if req := <-waits; len(req.Copies) == copies {
			break
		}
	}
	select {
	case <-time.After(time.Minute):
		t.Fatal("neither a host wait again nor a copy woken within a minute")
	case id := <-woke:
		t.Fatalf("copy of stream %d woken by a host wait that was only late", id)
	case req := <-waits:
		if len(req.Copies) != copies {
			t.Fatalf("host wait sent again names %d copies, want %d", len(req.Copies), copies)
		}
	}
	if n := idleCopiesOf(n2, "n1"); n != copies {
		t.Fatalf("%d copies asleep on n1 after a late host wait, want %d", n, copies)
	}

	// Gone: no responders wakes every copy.
	if err := owner.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	for range copies {
		select {
		case <-woke:
		case <-time.After(time.Minute):
			t.Fatalf("copies still asleep a minute after their owner host went: %d", idleCopiesOf(n2, "n1"))
		}
	}
}

// TestLateAnswerKeepsTheFollowersWaitGrowing: a follower whose long poll
// goes unanswered within its wait and the slack (a slow owner, a slow
// NATS) asks again with its wait doubled, as after an empty answer, not
// back at ReplWait: under load a copy's slack (replTimeout) grows with its
// wait until its answers come in time and it goes back to sleep. Before,
// every late answer put the wait back to ReplWait and its slack to 300 ms,
// so in a mass failover, when every answer took longer than that, each
// copy asked about every second for as long as the load lasted, and the
// load lasted (issue 17).
func TestLateAnswerKeepsTheFollowersWaitGrowing(t *testing.T) {
	const stream, id = "late", 7
	c := newMiniCluster(t)
	c.assign(assignment(stream, id, 1, "n1", []string{"n2"}))
	// n1 stands in for an owner that answers the first request (empty)
	// and is too slow to answer any after it.
	reqs := make(chan *frame.ReplRequest, 16)
	sub, err := c.nc.Subscribe(wire.ReplicationWildcard(stream, 1), func(m *nats.Msg) {
		req, err := frame.DecodeReplRequest(m.Data)
		if err != nil || m.Reply == "" {
			return
		}
		select {
		case reqs <- req:
		default:
		}
		if req.WaitMS == 100 {
			_ = m.Respond(frame.AppendBatch(nil, &frame.Batch{Epoch: 1}))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c.start("n2", func(cfg *Config) {
		cfg.ReplWait = 100 * time.Millisecond
		cfg.ReplIdleWait = time.Second
	})

	next := func() *frame.ReplRequest {
		t.Helper()
		select {
		case r := <-reqs:
			return r
		case <-time.After(time.Minute):
			t.Fatal("no replication request from n2 within a minute")
			return nil
		}
	}
	// Answered empty at 100 ms, so the next asks for 200 ms; unanswered,
	// so the one after asks for 400 ms, not 100 ms again.
	for _, want := range []uint32{100, 200, 400} {
		if r := next(); r.WaitMS != want {
			t.Fatalf("request waits %d ms, want %d", r.WaitMS, want)
		}
	}
}

// TestHostWaitOnAnotherNodesSubjectRefused: a host wait whose body names
// another node than its subject's last token is refused bad_request, as a
// replication request is.
func TestHostWaitOnAnotherNodesSubjectRefused(t *testing.T) {
	c := newMiniCluster(t)
	c.assign(assignment("hw", 9, 1, "n1", []string{"n2"}))
	c.start("n1", nil)
	c.waitCopy("n1", "hw", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	req := frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 100, Copies: []frame.HostWaitCopy{{StreamID: 9, Epoch: 1}}})
	resp, err := c.nc.Request(wire.HostReplSubject("n1", "n3"), req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := replyError(resp); e == nil || e.Code != wire.CodeBadRequest || !strings.Contains(e.Message, "names node n2") {
		t.Fatalf("host wait naming n2 on n3's subject answered %v; want bad_request", e)
	}
	// On its own subject it is answered: stream 9 at epoch 1 is owned
	// here and n2 follows it, nothing is past its tails and they are the
	// ack the owner counted (n2 acks them first, as its own request
	// would), so the wait ends with nothing; a copy at another epoch is
	// woken at once.
	ackEmptyAsN2(t, c)
	resp, err = c.nc.Request(wire.HostReplSubject("n1", "n2"), req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := frame.DecodeHostWake(resp.Data); err != nil || len(w.StreamIDs) != 0 {
		t.Fatalf("host wait on its own subject: %+v, %v (%q); want an empty wake", w, err, resp.Data)
	}
	stale := frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: 5000, Copies: []frame.HostWaitCopy{{StreamID: 9, Epoch: 0}}})
	began := time.Now()
	resp, err = c.nc.Request(wire.HostReplSubject("n1", "n2"), stale, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := frame.DecodeHostWake(resp.Data); err != nil || len(w.StreamIDs) != 1 || w.StreamIDs[0] != 9 || time.Since(began) > 2*time.Second {
		t.Fatalf("host wait for an old epoch: %+v, %v after %v; want stream 9 woken at once", w, err, time.Since(began))
	}
}

// ackEmptyAsN2 acks stream hw (id 9, epoch 1, owned by n1, followed by
// n2) as n2 at its empty log, as n2's own request would.
func ackEmptyAsN2(t *testing.T, c *miniCluster) {
	t.Helper()
	d0, err := c.hosts["n1"].h.store.Get("hw").DigestAt(0)
	if err != nil {
		t.Fatal(err)
	}
	ack := frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: 9, TailDigest: d0, WaitMS: 10, MaxBytes: 1 << 10}
	if resp, err := c.nc.Request(wire.ReplicationSubject("hw", 1, "n2"), frame.AppendReplRequest(nil, &ack), 5*time.Second); err != nil || replyError(resp) != nil {
		t.Fatalf("n2's ack: %v %v", err, replyError(resp))
	}
}

// TestCopyTurningIdleJoinsTheHostWaitAtOnce: a copy that turns idle while
// its host's host wait (without it) is in flight has that one cancelled,
// and the next, with it, goes out within hostWaitGather: a record appended
// to its stream just after is confirmed well within the idle wait. Without
// the resend the copy waits unnoticed until the host wait in flight ends
// (up to an idle wait).
func TestCopyTurningIdleJoinsTheHostWaitAtOnce(t *testing.T) {
	c, names := idleCluster(t, 2)
	waitIdle(t, c, 2)
	for i := range 3 {
		// The publish wakes the copies of names[1]; they fetch, ack and,
		// once a request of the whole idle wait comes back empty, sleep
		// again, while the host waits of n2 and n3 hold names[0] alone
		// (a record too large for the wake, so that they ask on their
		// own and join a host wait in flight when they sleep again).
		c.mustPublish(names[1], largeRecord())
		waitIdle(t, c, 2)
		began := time.Now()
		c.mustPublish(names[1], payload(2+2*i))
		if took := time.Since(began); took >= idleTestWait/4 {
			t.Fatalf("round %d: a publish just after its copies turned idle confirmed in %v, not well within the idle wait %v", i, took, idleTestWait)
		}
		waitIdle(t, c, 2)
	}
}

// TestBusyStreamKeepsItsOwnLongPoll: the copies of a busy stream (records
// came to them twice within an idle wait before the next) keep their own
// long poll, answered with the records, and never sleep on a host wait
// while it stays busy: a busy copy goes idle only once a request of the
// whole idle wait came back empty. Without that rule a copy slept after
// every empty short request, and each record reached it by a host wake and
// a request of its own. (A new stream's copies sleep once they hold its
// first record, and again after the second; the third within an idle wait
// finds the stream busy, and they keep their own long poll.)
func TestBusyStreamKeepsItsOwnLongPoll(t *testing.T) {
	c, names := idleCluster(t, 1)
	for i := range 3 {
		c.mustPublish(names[0], payload(100+i))
		time.Sleep(300 * time.Millisecond)
	}
	hostWaits := countSubject(t, c.nc, "brook.hostrepl.>")
	// Written every 300 ms, well under the idle wait, for a few idle waits
	// of the copies' short waits doubling.
	for i := range 15 {
		c.mustPublish(names[0], payload(2+i))
		time.Sleep(300 * time.Millisecond)
	}
	if n := hostWaits.Load(); n != 0 {
		t.Fatalf("%d host waits for a stream written every 300 ms (idle wait %v); want none", n, idleTestWait)
	}
	// Left alone, its copies sleep on host waits after one idle wait.
	waitIdle(t, c, 1)
}

// TestNewStreamsCopiesSleepOnceTheyHoldItsFirstRecord: a new stream's
// follower copies, whose first records come after none for a whole idle
// wait (none ever) and bring them to the owner's tail, sleep on their
// host's host wait as soon as they have acked them, and ask nothing more:
// before, each long-polled with a doubling wait until one of a whole idle
// wait came back empty (here about 4 s, 6 requests per copy; 7.5 s at the
// defaults, for every copy of every stream created, and for every new
// follower role of a failover). Also the host wait that follows the ack
// at once must not wake the copy: it may reach the owner before the ack
// on its own subject is counted (ackInFlightWait); waking it then made it
// ask and long-poll for a whole idle wait after nearly every such sleep.
func TestNewStreamsCopiesSleepOnceTheyHoldItsFirstRecord(t *testing.T) {
	const streams = 4
	c, _ := idleCluster(t, streams) // both followers hold the first record
	began := time.Now()
	waitIdle(t, c, streams)
	if took := time.Since(began); took >= idleTestWait/2 {
		t.Fatalf("copies took %v to sleep once they held their stream's first record; want at once, not after long polls (idle wait %v)", took, idleTestWait)
	}
	requests, _ := replRequests(t, c.nc)
	time.Sleep(idleTestWait)
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d per-copy requests in an idle wait after the first record of %d new streams; want none (asleep on host waits)", n, streams)
	}
	if n := idleCopiesOf(c.hosts["n2"].h, "n1") + idleCopiesOf(c.hosts["n3"].h, "n1"); n != 2*streams {
		t.Fatalf("%d copies asleep, want %d", n, 2*streams)
	}
}

// failoverToN2 stands in for a failover of idleCluster's streams: n1's
// connection closes and the streams are assigned at epoch 2 to n2, with n3
// following, as a recovery would after sealing n2 and n3.
func failoverToN2(t *testing.T, c *miniCluster, names []string) {
	t.Helper()
	c.hosts["n1"].h.nc.Close()
	var as []wire.AssignedStream
	for i, s := range names {
		tail := c.waitCopy("n2", s, "its tail", func(wire.CopyStatus) bool { return true }).RecordTail
		as = append(as, assignment(s, uint64(100+i), 2, "n2", []string{"n3"},
			wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: tail, Node: "n2"}))
	}
	c.assign(as...)
	for _, s := range names {
		c.waitCopy("n2", s, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
		c.waitCopy("n3", s, "following at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 2 })
	}
}

// TestNewFollowerRoleOfAnIdleStreamSleepsAfterItsFirstRecords: after a
// failover, the new follower role of a copy that had no records for a
// whole idle wait sleeps once it holds the first records at the new epoch
// and acked them: no long polls after them. At 10,000 streams the 5,000
// new roles' long polls of 7.5 s each were some 20,000 requests in the
// failover's seconds (issue 17).
func TestNewFollowerRoleOfAnIdleStreamSleepsAfterItsFirstRecords(t *testing.T) {
	const streams = 3
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	time.Sleep(idleTestWait)
	failoverToN2(t, c, names)
	for i, s := range names {
		if pc := c.mustPublish(s, payload(1+i)); pc.Epoch != 2 || pc.Copies < 2 {
			t.Fatalf("publish to %s after the failover: %+v", s, pc)
		}
		c.waitCopy("n3", s, "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 2 })
	}
	requests, _ := replRequests(t, c.nc)
	deadline := time.Now().Add(idleTestWait / 2)
	for idleCopiesOf(c.hosts["n3"].h, "n2") != streams {
		if time.Now().After(deadline) {
			t.Fatalf("%d of n3's %d new follower roles asleep %v after their first records; want all", idleCopiesOf(c.hosts["n3"].h, "n2"), streams, idleTestWait/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(idleTestWait)
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d per-copy requests in an idle wait after the new roles' first records; want none", n)
	}
}

// TestNewFollowerRoleOfABusyStreamKeepsItsLongPoll: the follower role
// after a failover of a stream written until then keeps its own long poll
// (the replica hands the records' time from one role to the next): it does
// not sleep after its first records to be woken by the next, one host wait
// each. Without the hand-over the new role had no records before and slept
// after its first.
func TestNewFollowerRoleOfABusyStreamKeepsItsLongPoll(t *testing.T) {
	// An idle wait well over what the failover below takes on a loaded
	// machine: records on either side of it come within one.
	c, names := idleClusterWith(t, 1, 5*time.Second)
	for i := range 5 {
		c.mustPublish(names[0], payload(1+i))
		time.Sleep(50 * time.Millisecond)
	}
	failoverToN2(t, c, names)
	hostWaits := countSubject(t, c.nc, "brook.hostrepl.n2.>")
	for i := range 10 {
		c.mustPublish(names[0], payload(6+i))
		time.Sleep(50 * time.Millisecond)
	}
	if n := hostWaits.Load(); n != 0 {
		t.Fatalf("%d host waits to the new owner for a stream written every 50 ms across the failover; want none", n)
	}
	if n := idleCopiesOf(c.hosts["n3"].h, "n2"); n != 0 {
		t.Fatalf("n3's follower role of a busy stream asleep after the failover")
	}
}

// TestCopiesTurningIdleAreGathered: copies turning idle one after another
// are gathered into one host wait resend per hostWaitGather, not one each.
// Without the gathering each copy joining cancelled and resent the host
// wait in flight.
func TestCopiesTurningIdleAreGathered(t *testing.T) {
	const streams = 20
	c, names := idleCluster(t, streams)
	waitIdle(t, c, streams)
	// Wake every copy, so that they turn idle again one after another (an
	// idle wait and their doubling waits later), 15 ms apart: each busy
	// (keepAwake: records too large for a wake, three times, so that the
	// copies ask on their own and keep their long poll; a small record
	// comes in the wake, and a copy not busy sleeps again at once), then
	// one more record each, one stream after another.
	keepAwake(t, c, names...)
	for _, s := range names {
		c.mustPublish(s, largeRecord())
		time.Sleep(15 * time.Millisecond)
	}
	waitIdle(t, c, 0)
	hostWaits := countSubject(t, c.nc, "brook.hostrepl.>")
	for idleCopiesOf(c.hosts["n2"].h, "n1") == 0 && idleCopiesOf(c.hosts["n3"].h, "n1") == 0 {
		time.Sleep(time.Millisecond)
	}
	began := time.Now()
	waitIdle(t, c, streams)
	took := time.Since(began)
	n := hostWaits.Load()
	// Per follower host: the first, one per gather time while copies
	// join, and the one with the last of them.
	most := 2 * (int64(took/hostWaitGather) + 2)
	t.Logf("%d host waits while %d copies per host turned idle over %v", n, streams, took)
	if n > most {
		t.Fatalf("%d host waits while the copies turned idle over %v; want at most %d (one per %v per host)", n, took, most, hostWaitGather)
	}
}

// TestIdleFollowerStaysLive: a follower copy asleep on host waits keeps
// its ack fresh at the owner (each host wait naming the tails it acked
// refreshes it), so it still counts as live for retention and a graceful
// shutdown's settling after liveFollower. Without the refresh its ack aged
// from its last own request on.
func TestIdleFollowerStaysLive(t *testing.T) {
	c, _ := idleCluster(t, 1)
	waitIdle(t, c, 1)
	time.Sleep(2 * idleTestWait)
	o := c.hosts["n1"].h.ownedIDs.get(100)
	if o == nil {
		t.Fatal("n1 does not own stream 100")
	}
	o.mu.Lock()
	acks := maps.Clone(o.mu.conf.acks)
	o.mu.Unlock()
	for _, n := range []string{"n2", "n3"} {
		a, ok := acks[n]
		if !ok {
			t.Fatalf("no ack of %s", n)
		}
		if age := time.Since(a.at); age > idleTestWait+time.Second {
			t.Fatalf("%s's ack is %v old after %v asleep; want at most an idle wait and a second", n, age, 2*idleTestWait)
		}
	}
}

// TestIdleFollowerFollowsTheOwnersRetention: an idle follower keeps what
// its owner keeps: its host wait names the owner's head it knows, and the
// owner wakes it when its head differs, so it learns the head within about
// an idle wait, as it did when each copy long polled on its own. Without
// the known head the owner never named it (its tail is not below the new
// head) and it kept every record until the next publish.
func TestIdleFollowerFollowsTheOwnersRetention(t *testing.T) {
	retained := assignment("ret", 7, 1, "n1", []string{"n2", "n3"})
	// Kept long enough for the followers to sleep on host waits first.
	retained.Retention = wire.Retention{MaxAgeMS: 6000}
	c := newMiniCluster(t)
	c.assign(retained)
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, func(cfg *Config) {
			cfg.ReplWait, cfg.ReplIdleWait = 50*time.Millisecond, time.Second
			cfg.RetentionInterval = 20 * time.Millisecond
		})
	}
	c.waitCopy("n1", "ret", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	for i := range 5 {
		c.mustPublish("ret", payload(i))
	}
	waitIdle(t, c, 1) // asleep on host waits
	if tl := c.hosts["n1"].h.store.Get("ret").Tails(); tl.Head != 0 {
		t.Fatalf("owner trimmed to %d before its followers slept", tl.Head)
	}
	trimmed := func(tl streamlog.Tails) bool { return tl.Head == 5 }
	c.waitTails("n1", "ret", "owner trimmed by age", trimmed)
	for _, n := range []string{"n2", "n3"} {
		c.waitTails(n, "ret", "follower trimmed to the owner's head", trimmed)
	}
}

// benchHostWaitOwner returns a host owning n empty copies (a real Pebble
// store in memory) followed by n2 and n3, n2's ack counted at their tails,
// and n2's host wait naming every copy quiet.
func benchHostWaitOwner(b testing.TB, n int) (*Host, *frame.HostWait) {
	b.Helper()
	st, err := streamlog.Open(streamlog.Options{Dir: "bench", FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	h := &Host{}
	req := &frame.HostWait{Node: "n2", WaitMS: 4000}
	for i := range n {
		id := uint64(100 + i)
		stream := fmt.Sprintf("s%d", i)
		cp, err := st.Create(stream, id, wire.Retention{})
		if err != nil {
			b.Fatal(err)
		}
		o := &owner{h: h, c: cp, stream: stream, id: id, epoch: 1}
		o.mu.conf = newConfirmer(stream, id, 1, time.Second, 0)
		o.mu.conf.setAssignment("n1", []string{"n2", "n3"}, 2, 1)
		t := cp.Tails()
		o.mu.conf.acked("n2", t.RecordWritten, t.CursorWritten, time.Now())
		h.ownedIDs.put(o)
		req.Copies = append(req.Copies, frame.HostWaitCopy{StreamID: id, Epoch: 1, RecordTail: t.RecordWritten, CursorTail: t.CursorWritten, KnownHead: t.Head})
	}
	return h, req
}

// hostWaitFirstPass is serveHostWait's first pass over req (the benchmark's
// unit).
func hostWaitFirstPass(h *Host, req *frame.HostWait) []uint64 {
	ids, fetch, _ := hostWakeIDs(req, h.ownedIDs.getCopies(req.Copies, nil), true)
	for _, i := range fetch {
		ids = append(ids, req.Copies[i].StreamID)
	}
	return ids
}

// BenchmarkServeHostWaitPerJoin is the owner host's work for one copy
// joining a follower host's idle set of n quiet copies. "whole": the
// first pass of serveHostWait over every copy named, with the liveness
// refresh, as when the follower host resent its whole set per join (and
// still, at most once per half wait, to keep the copies live). "change":
// a host wait change naming that copy applied to the set the owner host
// holds, and its first pass over the copies it made dirty. Issue 17.
func BenchmarkServeHostWaitPerJoin(b *testing.B) {
	for _, n := range []int{1000, 7000} {
		b.Run(fmt.Sprintf("whole/copies=%d", n), func(b *testing.B) {
			h, req := benchHostWaitOwner(b, n)
			b.ResetTimer()
			for b.Loop() {
				if ids := hostWaitFirstPass(h, req); len(ids) != 0 {
					b.Fatalf("%d copies woken, want none", len(ids))
				}
			}
		})
		b.Run(fmt.Sprintf("change/copies=%d", n), func(b *testing.B) {
			h, req := benchHostWaitOwner(b, n)
			s := &waitSet{node: req.Node}
			pw := &parkedWait{set: s, waitMS: req.WaitMS, full: true}
			s.mu.Lock()
			s.replace(req, 1, true)
			s.cur = pw
			s.mu.Unlock()
			wait := time.Duration(req.WaitMS) * time.Millisecond
			if check, _, _, _ := s.take(pw, true, wait, time.Now()); len(check) != n {
				b.Fatalf("the whole set's first pass looked at %d copies, want %d", len(check), n)
			}
			pw.full = false
			var owners []*owner
			b.ResetTimer()
			for b.Loop() {
				s.mu.Lock()
				s.apply(&frame.HostWaitChange{Node: req.Node, Base: s.gen, Gen: s.gen + 1, Copies: req.Copies[:1]})
				s.mu.Unlock()
				check, _, _, _ := s.take(pw, true, wait, time.Now())
				if len(check) != 1 {
					b.Fatalf("a change of one copy looked at %d", len(check))
				}
				s.watchOwners(check, h.ownedIDs.getCopies(check, owners))
				owners = h.ownedIDs.getCopies(check, owners)
				if ids, fetch, _ := hostWakeIDs(&frame.HostWait{Node: req.Node, Copies: check}, owners, true); len(ids)+len(fetch) != 0 {
					b.Fatalf("%d copies woken, want none", len(ids)+len(fetch))
				}
			}
		})
	}
}

// TestHostWakeIDsOneLockPerCopy checks the one-lock check of a host wait's
// copies against each reason to wake, and that only a refreshing pass
// keeps a quiet copy's ack fresh.
func TestHostWakeIDsOneLockPerCopy(t *testing.T) {
	h, req := benchHostWaitOwner(t, 5)
	owners := h.ownedIDs.getCopies(req.Copies, nil)
	if ids, _, _ := hostWakeIDs(req, owners, false); len(ids) != 0 {
		t.Fatalf("quiet copies woken: %v", ids)
	}
	ackAt := func(o *owner) time.Time {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.mu.conf.acks["n2"].at
	}
	before := ackAt(owners[0])
	time.Sleep(time.Millisecond)
	hostWakeIDs(req, owners, false)
	if !ackAt(owners[0]).Equal(before) {
		t.Fatal("a pass without refresh refreshed the ack")
	}
	hostWakeIDs(req, owners, true)
	if !ackAt(owners[0]).After(before) {
		t.Fatal("a refreshing pass did not refresh the quiet copy's ack")
	}
	req.Copies[1].Epoch = 2      // another epoch
	req.Copies[2].RecordTail = 7 // not the owner's tail nor the counted ack
	req.Copies[3].KnownHead = 3  // not the owner's head
	owners[4] = nil              // not owned here
	ids, _, _ := hostWakeIDs(req, owners, true)
	if want := []uint64{101, 102, 103, 104}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("woken %v, want %v", ids, want)
	}
	other := *req
	other.Node = "n4" // not a follower
	other.Copies = other.Copies[:1]
	if ids, _, _ := hostWakeIDs(&other, owners[:1], true); len(ids) != 1 {
		t.Fatalf("a copy of a node that does not follow was not woken: %v", ids)
	}
}

// A role stopped between the host wait's watch and its first pass (its
// stop removed it from the index and signalled a change no watch heard
// yet) wakes the copy on the first pass: the pass looks the owners up
// after the watch is set. Review R6: the first pass reused owners looked
// up before the watch, found the stopped role still following and acked,
// and left the copy asleep for the whole wait.
func TestHostWaitFirstPassAfterAStop(t *testing.T) {
	h, req := benchHostWaitOwner(t, 3)
	s := &waitSet{node: req.Node}
	s.replace(req, 0, false)
	s.watchOwners(req.Copies, h.ownedIDs.getCopies(req.Copies, nil))
	if len(s.watch) != 3 {
		t.Fatalf("watch %v, want the 3 owned streams", s.watch)
	}
	stopped := h.ownedIDs.getCopies(req.Copies[1:2], nil)[0]
	h.ownedIDs.remove(stopped) // owner.stop's first step
	ids, _, _ := hostWakeIDs(req, h.ownedIDs.getCopies(req.Copies, nil), true)
	if len(ids) != 1 || ids[0] != stopped.id {
		t.Fatalf("first pass woke %v, want only the stopped role's stream %d", ids, stopped.id)
	}
}

// TestHostWaitLeavesACopyWhoseAckIsOnItsWayAsleep: a host wait naming
// tails past the ack the owner counted for the copy, within what the owner
// wrote, is an ack still on its way (it follows the copy's standalone ack
// on another subject): the copy is not woken. Once the ack is counted the
// copy is quiet and the wait ends with nothing; an ack that never comes
// wakes the copy after ackInFlightWait, and its own request then carries
// it. Before, the copy was woken at once, asked, and long-polled a whole
// idle wait.
func TestHostWaitLeavesACopyWhoseAckIsOnItsWayAsleep(t *testing.T) {
	const stream, id = "onitsway", 31
	c, n1 := startOwnerAlone(t, stream, id)
	owned := n1.h.store.Get(stream)
	digest := digestsOf(t, owned)
	subj := wire.ReplicationSubject(stream, 1, "n2")
	// n2 acks tail 0 with a request of its own, then the owner writes a
	// record.
	ack := frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: id, TailDigest: digest(0), WaitMS: 10, MaxBytes: 1 << 10}
	if resp, err := c.nc.Request(subj, frame.AppendReplRequest(nil, &ack), 5*time.Second); err != nil || replyError(resp) != nil {
		t.Fatalf("n2's ack of 0: %v %v", err, replyError(resp))
	}
	done := make(chan published, 8)
	written := func(n uint64) {
		t.Helper()
		for owned.Tails().RecordWritten < n {
			time.Sleep(time.Millisecond)
		}
	}
	const wait = 3 * ackInFlightWait
	hostWaitFor := func(tail uint64) []byte {
		return frame.AppendHostWait(nil, &frame.HostWait{Node: "n2", WaitMS: uint32(wait / time.Millisecond),
			Copies: []frame.HostWaitCopy{{StreamID: id, Epoch: 1, RecordTail: tail}}})
	}
	// hostWait sends n2's host wait naming tail; its answer comes later.
	hostWait := func(tail uint64) <-chan *nats.Msg {
		out := make(chan *nats.Msg, 1)
		req := hostWaitFor(tail)
		go func() {
			resp, err := c.nc.Request(wire.HostReplSubject("n1", "n2"), req, wait+5*time.Second)
			if err != nil {
				t.Error(err)
			}
			out <- resp
		}()
		return out
	}
	c.publishTo(stream, 0, done)
	written(1)
	wakeOf := func(resp *nats.Msg) []uint64 {
		t.Helper()
		if resp == nil {
			t.FailNow()
		}
		w, err := frame.DecodeHostWake(resp.Data)
		if err != nil {
			t.Fatalf("host wake: %v (%q)", err, resp.Data)
		}
		return w.StreamIDs
	}

	// Naming tail 1, its ack of 1 not yet sent: asleep; the ack comes
	// 300 ms later, and the wait ends with nothing at its end.
	began := time.Now()
	answered := hostWait(1)
	time.Sleep(300 * time.Millisecond)
	select {
	case resp := <-answered:
		t.Fatalf("a copy whose ack is on its way woken after %v: %v", time.Since(began), wakeOf(resp))
	default:
	}
	ack.RecordTail, ack.TailDigest = 1, digest(1)
	if err := c.nc.Publish(subj, frame.AppendReplRequest(nil, &ack)); err != nil {
		t.Fatal(err)
	}
	if ids := wakeOf(<-answered); len(ids) != 0 || time.Since(began) < wait {
		t.Fatalf("host wait answered %v after %v; want nothing, at the end of its wait %v", ids, time.Since(began), wait)
	}
	if r := <-done; r.e != nil || r.pc.Offset != 0 {
		t.Fatalf("publish: %+v %v", r.pc, r.e)
	}

	// Naming tail 2, its ack on its way, while the owner writes a third
	// record (a change: a pass over every copy, the copy still in flight):
	// once the ack is counted (no change signalled), the recheck finds the
	// copy behind by records and wakes it at once.
	c.publishTo(stream, 1, done)
	written(2)
	answered = hostWait(2)
	time.Sleep(100 * time.Millisecond)
	c.publishTo(stream, 2, done)
	written(3)
	time.Sleep(100 * time.Millisecond)
	ack.RecordTail, ack.TailDigest = 2, digest(2)
	acked := time.Now()
	if err := c.nc.Publish(subj, frame.AppendReplRequest(nil, &ack)); err != nil {
		t.Fatal(err)
	}
	if ids := wakeOf(<-answered); len(ids) != 1 || ids[0] != id || time.Since(acked) > ackInFlightWait/2 {
		t.Fatalf("host wait answered %v %v after the ack; want stream %d woken for the record at once", ids, time.Since(acked), id)
	}

	// A record whose ack never comes (lost): the copy is woken
	// ackInFlightWait after the first host wait named its tails, though
	// each host wait is replaced by the next 300 ms later (copies joining
	// the follower host's set): the wait is per copy, not per host wait.
	c.publishTo(stream, 3, done)
	written(4)
	began = time.Now()
	for {
		resp, err := c.nc.Request(wire.HostReplSubject("n1", "n2"), hostWaitFor(4), 300*time.Millisecond)
		took := time.Since(began)
		if errors.Is(err, nats.ErrTimeout) {
			if took > 3*ackInFlightWait {
				t.Fatalf("a copy whose ack is lost still asleep after %v of host waits replaced every 300 ms", took)
			}
			continue // replaced by the next, unanswered
		}
		if err != nil {
			t.Fatal(err)
		}
		if ids := wakeOf(resp); len(ids) != 1 || ids[0] != id || took < ackInFlightWait {
			t.Fatalf("host waits answered %v after %v; want stream %d woken after %v", ids, took, id, ackInFlightWait)
		}
		break
	}

	// The copy's own request carries the ack (the time starts again); one
	// more record whose ack is lost, under one host wait that nothing
	// replaces: woken ackInFlightWait after, well before the wait's end.
	ack.RecordTail, ack.TailDigest = 4, digest(4)
	if err := c.nc.Publish(subj, frame.AppendReplRequest(nil, &ack)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	c.publishTo(stream, 4, done)
	written(5)
	began = time.Now()
	resp, err := c.nc.Request(wire.HostReplSubject("n1", "n2"), hostWaitFor(5), wait+5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ids, took := wakeOf(resp), time.Since(began); len(ids) != 1 || ids[0] != id || took < ackInFlightWait || took > wait*2/3 {
		t.Fatalf("host wait answered %v after %v; want stream %d woken after %v, well before its end %v", ids, took, id, ackInFlightWait, wait)
	}
}

// TestQuietCopiesSleepAfterTheirFirstEmptyAnswer: follower copies that have
// had no records for a whole idle wait (here: new streams, never written)
// sleep on host waits after their first empty answer, not after long polls
// of a doubling wait until one of a whole idle wait came back empty (here
// 50 ms doubling to 2 s, about 4 s and 7 requests a copy; at the defaults
// 7 s and 3 requests for every copy of every stream created).
func TestQuietCopiesSleepAfterTheirFirstEmptyAnswer(t *testing.T) {
	const streams = 4
	c := newMiniCluster(t)
	var as []wire.AssignedStream
	for i := range streams {
		as = append(as, assignment(fmt.Sprintf("quiet%d", i), uint64(100+i), 1, "n1", []string{"n2", "n3"}))
	}
	c.assign(as...)
	requests, _ := replRequests(t, c.nc)
	began := time.Now()
	for _, n := range []string{"n1", "n2", "n3"} {
		c.start(n, func(cfg *Config) {
			cfg.ReplWait = 50 * time.Millisecond
			cfg.ReplIdleWait = idleTestWait
		})
	}
	waitIdle(t, c, streams)
	if took := time.Since(began); took >= idleTestWait {
		t.Fatalf("new copies of unwritten streams asleep %v after their hosts started; want after their first empty answer (the idle wait is %v)", took, idleTestWait)
	}
	// The first request of each copy and its few retries while the owner
	// was not yet serving (no responders are not counted here: the server
	// answers them).
	if n := requests.Load(); n > 4*2*streams {
		t.Fatalf("%d per-copy requests before %d quiet copies slept; want a few each", n, 2*streams)
	}
	// Written now: the record comes in the wake, and its copies sleep again.
	pc := c.mustPublish("quiet0", payload(0))
	if pc.Copies < 2 {
		t.Fatalf("publish: %+v", pc)
	}
	for _, n := range []string{"n2", "n3"} {
		c.waitCopy(n, "quiet0", "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == 1 })
	}
	waitIdle(t, c, streams)
}

// TestStreamWrittenTwiceKeepsItsCopiesAsleep: a stream not written for an
// idle wait, then written twice in a row (a failover's retried publish and
// the next; a client's two publishes), has its copies take both records in
// host wakes and sleep again after each: no long polls of their own.
// Before, the second record found the copy not quiet (records a moment
// before) and sent it back to its own long poll for a whole idle wait,
// four requests a copy: in a 10,000-stream failover, some 10,000.
func TestStreamWrittenTwiceKeepsItsCopiesAsleep(t *testing.T) {
	c, names := idleCluster(t, 2)
	waitIdle(t, c, 2)
	time.Sleep(idleTestWait)
	requests, _ := replRequests(t, c.nc)
	for _, s := range names {
		for i := range 2 {
			c.mustPublish(s, payload(1+i))
			for _, n := range []string{"n2", "n3"} {
				c.waitCopy(n, s, "the record", func(cs wire.CopyStatus) bool { return cs.RecordTail == uint64(2+i) })
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitIdle(t, c, 2)
	time.Sleep(idleTestWait)
	// A copy whose next host wait beats its ack to the owner asks once.
	if n := requests.Load(); n > 2 {
		t.Fatalf("%d per-copy requests for two records to each of 2 idle streams; want none (the wakes carry them)", n)
	}
}
