package host

import (
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestHostWaitWakesACopyWhoseAckIsBehind: a follower (n2, played by the
// test; W = 2, n3 silent) wrote record 0 and asked with durable tail 0 and
// read position 1, as the pipelined follower does while its fsync runs. The
// fsync lands; its standalone ack (a plain publish, at most once) is lost.
// Its poll of the whole idle wait comes back empty, so it sleeps on a host
// wait naming its durable tail 1, the owner's written tail. The owner's ack
// of n2 is 0: unless the owner wakes the copy (its own request carries the
// ack), record 0 is never confirmed while the stream stays quiet.
func TestHostWaitWakesACopyWhoseAckIsBehind(t *testing.T) {
	const stream, id = "ackbehind", 51
	c, n1 := startOwnerAlone(t, stream, id)
	done := make(chan published, 1)
	c.publishTo(stream, 0, done)
	owned := n1.h.store.Get(stream)
	for owned.Tails().Record < 1 {
		time.Sleep(time.Millisecond)
	}
	d0, _ := owned.DigestAt(0)
	d1, _ := owned.DigestAt(1)
	req := frame.ReplRequest{Node: "n2", Epoch: 1, StreamID: id, RecordTail: 0, TailDigest: d0, ReadFrom: 1, ReadDigest: d1, WaitMS: 200}
	resp, err := c.nc.Request(wire.ReplicationSubject(stream, 1, "n2"), frame.AppendReplRequest(nil, &req), 5*time.Second)
	if err != nil || replyError(resp) != nil {
		t.Fatalf("poll: %v %v", err, replyError(resp))
	}
	// (the standalone ack of tail 1 is lost)
	ot := owned.Tails()
	hw := frame.HostWait{Node: "n2", WaitMS: 1500, Copies: []frame.HostWaitCopy{{StreamID: id, Epoch: 1, RecordTail: 1, CursorTail: ot.CursorDurable, KnownHead: ot.Head}}}
	start := time.Now()
	resp, err = c.nc.Request(wire.HostReplSubject("n1", "n2"), frame.AppendHostWait(nil, &hw), 5*time.Second)
	if err != nil || replyError(resp) != nil {
		t.Fatalf("host wait: %v %v", err, replyError(resp))
	}
	wake, err := frame.DecodeHostWake(resp.Data)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("publish answered %+v %v", r.pc, r.e)
	default:
	}
	if len(wake.StreamIDs) == 0 {
		t.Fatalf("host wait answered after %v waking nothing: the copy sleeps on with the owner's ack of it at 0 < its durable tail 1; record 0 stays unconfirmed until the next write", time.Since(start).Round(time.Millisecond))
	}
}
