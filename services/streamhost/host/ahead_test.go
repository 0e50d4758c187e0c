package host

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestFollowerWrittenAheadBound: with the follower's fsync held, count the
// batches it writes (one record each) before it stops asking.
// followerAhead says at most 4 batches written and not yet durable.
func TestFollowerWrittenAheadBound(t *testing.T) {
	const stream, id, confirmed = "aheadbound", 41, 2
	c, n2, _, hold := startHeld(t, stream, id, confirmed, "n2", func(cfg *Config) { cfg.ConfirmTimeout = 30 * time.Second })
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release)
	hold.armed.Store(true)
	written := 0
	for i := 0; i < 10; i++ {
		go func() { _, _ = c.publish(stream, payload(confirmed+i), "", 0) }() // confirmed once the hold ends
		deadline := time.Now().Add(2 * time.Second)
		ok := false
		for time.Now().Before(deadline) {
			if tl := n2.h.store.Get(stream).Tails(); tl.RecordWritten == uint64(confirmed+i+1) {
				ok = true
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !ok {
			break
		}
		written++
	}
	tl := n2.h.store.Get(stream).Tails()
	t.Logf("follower tails with its fsync held: durable %d written %d; batches written not durable: %d", tl.Record, tl.RecordWritten, written)
	if written > followerAhead {
		t.Errorf("follower wrote %d batches not yet durable, followerAhead is %d", written, followerAhead)
	}
	release()
	n2.stop()
}

// TestReadDigestCheckedPastTheHead: a request whose durable tail is below
// the owner's retained head but whose read position is past it is served
// from the read position without its read digest being checked (docs:
// "It also checks the read digest at the read position before serving").
func TestReadDigestCheckedPastTheHead(t *testing.T) {
	const stream, id = "readhead", 42
	c, n1, _, _ := startTrimmed(t, stream, id)
	owned := n1.h.store.Get(stream)
	d16, err := owned.DigestAt(16)
	if err != nil {
		t.Fatal(err)
	}
	// n3 (a follower by the assignment, its durable tail below the
	// owner's head) asks from 16: a wrong digest there is diverged, the
	// right one is served from 16.
	subj := wire.ReplicationSubject(stream, 1, "n3")
	ask := func(digest uint64) *nats.Msg {
		req := frame.ReplRequest{Node: "n3", Epoch: 1, StreamID: id, RecordTail: 2, TailDigest: 12345, ReadFrom: 16, ReadDigest: digest, WaitMS: 100, MaxBytes: 1 << 20}
		resp, err := c.nc.Request(subj, frame.AppendReplRequest(nil, &req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if e := replyError(ask(d16 ^ 1)); e == nil || e.Code != wire.CodeDiverged {
		t.Fatalf("a wrong read digest at 16 past the head was answered %v; want diverged", e)
	}
	resp := ask(d16)
	if e := replyError(resp); e != nil {
		t.Fatalf("the right read digest at 16 was refused: %v", e)
	}
	b, err := frame.DecodeBatch(resp.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) == 0 || b.Records[0].Offset != 16 {
		t.Fatalf("served %d records from %v; want records from 16", len(b.Records), b.Records)
	}
}
