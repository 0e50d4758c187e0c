package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// readersAcrossFailover prepares the interleaving of issue 12: n1 owns the
// stream at epoch 1 with a tail of 8 but a watermark of 0 (neither
// follower has acknowledged anything), n2 holds the first 5 records. n1
// runs; n2 and n3 do not yet.
func readersAcrossFailover(t *testing.T, stream string, id uint64) *miniCluster {
	t.Helper()
	c := newMiniCluster(t)
	old := plain("a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7")
	c.prepareCopy("n1", stream, id, 1, old)
	c.prepareCopy("n2", stream, id, 1, old[:5])
	c.assign(assignment(stream, id, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	c.start("n1", nil)
	c.waitCopy("n1", stream, "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	return c
}

// promoteN2 stops n1 and makes n2 the owner at epoch 2 with its tail of 5
// as the epoch's start, followed by n3 (started only if startN3).
func promoteN2(c *miniCluster, stream string, id uint64, startN3 bool) {
	c.t.Helper()
	c.hosts["n1"].stop()
	c.assign(assignment(stream, id, 2, "n2", []string{"n3"},
		wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: 5, Node: "n2"}))
	c.start("n2", nil)
	if startN3 {
		c.start("n3", nil)
	}
	c.waitCopy("n2", stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
}

// TestLatestFetchNeverPastWatermark: a reader that starts at "latest" on an
// owner whose tail runs ahead of its watermark must not be told to go on
// past the watermark: when that owner dies and another is promoted with a
// shorter tail, the records confirmed there at the offsets in between
// would be skipped. Before the fix the reader got Next = 8 (the owner's
// tail) and never saw the confirmed records 5, 6 and 7.
func TestLatestFetchNeverPastWatermark(t *testing.T) {
	const stream, id = "latest", 1
	c := readersAcrossFailover(t, stream, id)

	b := c.fetch(stream, wire.FetchRequest{Start: "latest"})
	if b.Tail != 8 || b.Confirmed != 0 {
		t.Fatalf("setup: owner tail %d watermark %d, want 8 and 0", b.Tail, b.Confirmed)
	}
	if b.Next > b.Confirmed {
		t.Fatalf("a latest fetch answered next %d, past the confirmed watermark %d of the copy that answered", b.Next, b.Confirmed)
	}
	next := b.Next

	promoteN2(c, stream, id, true)
	confirmed := map[uint64]string{}
	for i := range 5 {
		data := fmt.Sprintf("b%d", i)
		pc := c.mustPublish(stream, []byte(data))
		if pc.Epoch != 2 {
			t.Fatalf("publish %d: %+v, want epoch 2", i, pc)
		}
		confirmed[pc.Offset] = data
	}
	for off := uint64(5); off < 10; off++ {
		if _, ok := confirmed[off]; !ok {
			t.Fatalf("confirms %v: want offsets 5..9", confirmed)
		}
	}

	// The reader goes on from where it was told to.
	got := map[uint64]string{}
	for next < 10 {
		b := c.fetch(stream, wire.FetchRequest{Start: "offset", Offset: next, WaitMS: 2000})
		for _, r := range b.Records {
			got[r.Offset] = string(r.Data)
		}
		if b.Next > b.Confirmed {
			t.Fatalf("fetch from %d answered next %d past the watermark %d", next, b.Next, b.Confirmed)
		}
		if b.Next <= next && len(b.Records) == 0 {
			t.Fatalf("reader stuck at %d (watermark %d, tail %d)", next, b.Confirmed, b.Tail)
		}
		next = b.Next
	}
	for off, data := range confirmed {
		if got[off] != data {
			t.Errorf("confirmed record %q at offset %d: the reader got %q", data, off, got[off])
		}
	}
}

// TestFetchWaitIsClampedNotWrapped: a wait_ms near 2^63 overflowed the
// conversion to a duration and the fetch returned at once; it must be held
// like any wait above the maximum, and so return the record published
// while it waits.
func TestFetchWaitIsClampedNotWrapped(t *testing.T) {
	const stream, id = "clamp", 2
	c := startPair(t, stream, id, nil)
	c.mustPublish(stream, payload(0))

	type result struct {
		b   *frame.Batch
		err error
	}
	done := make(chan result, 1)
	go func() {
		body, _ := json.Marshal(wire.FetchRequest{Start: "offset", Offset: 1, WaitMS: math.MaxInt64})
		resp, err := c.nc.Request(wire.FetchSubject(stream), body, 10*time.Second)
		if err != nil {
			done <- result{err: err}
			return
		}
		if e := replyError(resp); e != nil {
			done <- result{err: e}
			return
		}
		b, err := frame.DecodeBatch(resp.Data)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("fetch with wait_ms 2^63-1: %v", r.err)
		}
		t.Fatalf("fetch with wait_ms 2^63-1 returned at once with %d records (next %d): the wait wrapped around", len(r.b.Records), r.b.Next)
	case <-time.After(300 * time.Millisecond):
	}
	c.mustPublish(stream, payload(1))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.b.Records) != 1 || r.b.Records[0].Offset != 1 {
		t.Fatalf("long poll returned %d records (next %d), want record 1", len(r.b.Records), r.b.Next)
	}
}

// commitCursor sends a cursor commit to the stream's owner.
func (c *miniCluster) commitCursor(stream, cursor string, offset uint64, timeout time.Duration) (*wire.CursorCommitReply, *wire.Error) {
	c.t.Helper()
	body, _ := json.Marshal(wire.CursorCommit{Cursor: cursor, Offset: offset})
	resp, err := c.nc.Request(wire.CommitSubject(stream), body, timeout)
	if err != nil {
		return nil, &wire.Error{Code: "transport", Message: err.Error()}
	}
	if e := replyError(resp); e != nil {
		return nil, e
	}
	var r wire.CursorCommitReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		c.t.Fatalf("decode commit reply: %v", err)
	}
	return &r, nil
}

// TestCommitAboveFreshWatermark: right after a failover the new owner's
// watermark sits below what readers were given by the old owner (its
// followers have not acknowledged yet). A commit there is a reader's
// honest position, not a bug: it is held until the watermark passes it
// (or answered with a retryable code), never refused as a bad request.
// Before the fix it was answered bad_request. A commit past the owner's
// tail, which no reader can have been given, is still a bad request.
func TestCommitAboveFreshWatermark(t *testing.T) {
	const stream, id = "commit", 3
	c := readersAcrossFailover(t, stream, id)
	promoteN2(c, stream, id, false)
	if b := c.fetch(stream, wire.FetchRequest{Start: "earliest"}); b.Confirmed != 0 || b.Tail != 5 {
		t.Fatalf("setup: new owner tail %d watermark %d, want 5 and 0", b.Tail, b.Confirmed)
	}

	if _, e := c.commitCursor(stream, "r", 6, 5*time.Second); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("commit past the owner's tail: %v, want bad_request", e)
	}

	type result struct {
		r *wire.CursorCommitReply
		e *wire.Error
	}
	done := make(chan result, 1)
	go func() {
		r, e := c.commitCursor(stream, "r", 4, 5*time.Second)
		done <- result{r, e}
	}()
	time.Sleep(100 * time.Millisecond)
	c.start("n3", nil)
	r := <-done
	switch {
	case r.e == nil:
		if r.r.Offset != 4 {
			t.Fatalf("commit reply %+v, want offset 4", r.r)
		}
	case r.e.Code == wire.CodeBadRequest:
		t.Fatalf("commit at 4 below the new owner's tail 5 refused as a bad request: %v", r.e)
	default:
		// A retryable answer must be one the client retries.
		if r.e.Code != wire.CodeRecovering {
			t.Fatalf("commit at 4: %v, want success or recovering", r.e)
		}
		// and once the follower caught up, the commit goes through
		c.waitCopy("n3", stream, "caught up", func(cs wire.CopyStatus) bool { return cs.RecordTail >= 5 })
		if _, e := c.commitCursor(stream, "r", 4, 5*time.Second); e != nil {
			t.Fatalf("commit at 4 once the follower caught up: %v", e)
		}
	}
	if pos, ok := c.hosts["n2"].h.store.Get(stream).Cursor("r"); !ok || pos != 4 {
		t.Fatalf("cursor r at %d (%v), want 4", pos, ok)
	}
}

// fetchReply returns the raw reply to a fetch.
func (c *miniCluster) fetchReply(stream string, req wire.FetchRequest) *nats.Msg {
	c.t.Helper()
	body, _ := json.Marshal(req)
	resp, err := c.nc.Request(wire.FetchSubject(stream), body, 5*time.Second)
	if err != nil {
		c.t.Fatalf("fetch %s: %v", stream, err)
	}
	return resp
}

// TestFetchReplyNamesItsStream: a fetch reply says which stream (id) the
// records are of, so a reader learns the incarnation it reads on first
// contact and can pin it.
func TestFetchReplyNamesItsStream(t *testing.T) {
	const stream, id = "names", 7
	c := startPair(t, stream, id, nil)
	c.mustPublish(stream, payload(0))
	m := c.fetchReply(stream, wire.FetchRequest{Start: "earliest"})
	if got := m.Header.Get(wire.HeaderStreamID); got != "7" {
		t.Fatalf("fetch reply header %s = %q, want 7", wire.HeaderStreamID, got)
	}
}

// TestLateAckConfirmIsOnTheNewHistory pins down what a client may be told
// by a replaced owner. A follower's replication request is its ack; one
// sent before the follower was sealed and delivered after the next epoch
// serves is still counted by the old owner, which then confirms at the old
// epoch (seen 148 µs after the new owner served). The promise: such a
// confirm is true. Its offset is below the new epoch's start and the
// record is there, on the promoted copy, at that offset. A client without
// the owner probe (which would have abandoned the attempt) receives it as
// a confirm.
func TestLateAckConfirmIsOnTheNewHistory(t *testing.T) {
	const stream, id = "lateack", 11
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ConfirmTimeout = 20 * time.Second })
	c.mustPublish(stream, payload(0))

	// The follower goes quiet; the owner writes record 1 and waits for it.
	c.hosts["n2"].stop()
	cl := client.New(c.nc, client.WithOwnerProbe(0), client.WithRetry(1, 0), client.WithRequestTimeout(20*time.Second))
	type result struct {
		pc  wire.PublishConfirm
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		pc, err := cl.Publish(context.Background(), stream, payload(1))
		done <- result{pc, err, time.Now()}
	}()
	owner := c.hosts["n1"].h.store.Get(stream)
	for owner.Tails().Record < 2 {
		time.Sleep(time.Millisecond)
	}
	recs, err := owner.Read(1, 1, 0, 2)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read record 1 on the owner: %v, %d records", err, len(recs))
	}

	// The follower got record 1, made it durable and sent its ack — which
	// is delayed. Then it is sealed at epoch 2 and promoted with start 2.
	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir("n2"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fc := st.Get(stream)
	if _, err := fc.Append(context.Background(), [][]byte{recs[0].Data}); err != nil {
		t.Fatal(err)
	}
	digest, err := fc.DigestAt(2)
	if err != nil {
		t.Fatal(err)
	}
	lateAck := frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: id, RecordTail: 2, CursorTail: fc.Tails().CursorDurable, TailDigest: digest})
	if _, err := fc.Seal(2, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Only n2 hears of epoch 2: n1 is the replaced owner that has not
	// learnt it yet.
	c.table.Set(wire.AssignedStream{
		Assignment: wire.Assignment{Stream: stream, StreamID: id, Epoch: 2, Owner: "n2", Policy: "majority_durable"},
		Starts:     []wire.HistoryStart{{Epoch: 1, Node: "n1"}, {Epoch: 2, RecordTail: 2, Node: "n2"}},
	})
	c.start("n2", nil)
	c.waitCopy("n2", stream, "owner at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	served := time.Now()

	// The delayed ack arrives.
	if err := c.nc.Publish(wire.ReplicationSubject(stream, 1, "n2"), lateAck); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("publish: %v; want the late confirm", r.err)
	}
	if r.pc.Epoch != 1 || r.pc.Offset != 1 || r.pc.StreamID != id || !r.at.After(served) {
		t.Fatalf("confirm %+v at %v (epoch 2 served at %v); want offset 1 at epoch 1 after epoch 2 served", r.pc, r.at, served)
	}
	// The promise: below the new epoch's start, and there on the new
	// owner at that offset.
	if r.pc.Offset >= 2 {
		t.Fatalf("a replaced owner confirmed offset %d at or past the new epoch's start 2", r.pc.Offset)
	}
	got, err := c.hosts["n2"].h.store.Get(stream).Read(r.pc.Offset, 1, 0, 2)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Data, recs[0].Data) {
		t.Fatalf("the new owner at offset %d: %v %v; want the confirmed record", r.pc.Offset, got, err)
	}
}

// TestPositionsAfterFailoverStayAtTheSettledPoint: right after a failover
// the new owner's watermark is 0 until a follower acknowledges, but every
// record below its history start (5) is on every later owner. A consumer
// resuming from its cursor (4) must be told to go on at 4, not at the
// watermark: before the fix the empty reply said next 0, the consumer
// re-read the whole retained log and committed its cursor backwards; a
// commit at 4 was held for a second and refused; a latest reader was sent
// back to 0.
func TestPositionsAfterFailoverStayAtTheSettledPoint(t *testing.T) {
	const stream, id = "settled", 4
	c := readersAcrossFailover(t, stream, id)
	promoteN2(c, stream, id, false)
	began := time.Now()
	if _, e := c.commitCursor(stream, "r", 4, 5*time.Second); e != nil {
		t.Fatalf("commit at 4 below the new owner's start 5: %v", e)
	}
	if took := time.Since(began); took > 500*time.Millisecond {
		t.Fatalf("commit at 4 below the start took %v: held for the watermark", took)
	}
	b := c.fetch(stream, wire.FetchRequest{Cursor: "r", WaitMS: 100})
	if b.Confirmed != 0 || len(b.Records) != 0 {
		t.Fatalf("setup: watermark %d, %d records; want 0 and none", b.Confirmed, len(b.Records))
	}
	if b.Next != 4 {
		t.Fatalf("a cursor at 4 was told to go on at %d (watermark %d, start 5)", b.Next, b.Confirmed)
	}
	if b := c.fetch(stream, wire.FetchRequest{Start: "latest"}); b.Next != 5 {
		t.Fatalf("a latest reader was told to start at %d, want the start 5", b.Next)
	}
	// Past the start nothing is settled before the watermark: a commit at
	// 5 (= the tail, nothing there to have read) waits.
	if b := c.fetch(stream, wire.FetchRequest{Start: "offset", Offset: 5}); b.Next != 5 {
		t.Fatalf("offset 5: next %d", b.Next)
	}
}
