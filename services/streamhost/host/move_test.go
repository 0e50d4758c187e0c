package host

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// handoff sends a hand-off request to node.
func (c *miniCluster) handoff(node string, req wire.HandoffRequest) (*wire.HandoffReply, *wire.Error) {
	c.t.Helper()
	body, _ := json.Marshal(req)
	resp, err := c.nc.Request(wire.HandoffSubject(node), body, 5*time.Second)
	if err != nil {
		return nil, &wire.Error{Code: "transport", Message: err.Error()}
	}
	if e := replyError(resp); e != nil {
		return nil, e
	}
	var r wire.HandoffReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		c.t.Fatalf("decode hand-off reply: %v", err)
	}
	return &r, nil
}

// TestHandoff: a hand-off under publish load stops the owner's intake at
// a tail no later append passes (its seal reports the same tail), the
// target holds that tail, publishes meanwhile are refused with sealed and
// nothing is confirmed past the tail; after the commit the target owns the
// stream at the next epoch and the old owner follows it. Bad requests are
// coded, a resume or an expired hold takes publishes again, and a target
// that cannot catch up times the hand-off out with intake resumed.
func TestHandoff(t *testing.T) {
	const stream, id = "move", 7
	c := startPair(t, stream, id, func(cfg *Config) { cfg.ConfirmTimeout = time.Second })
	for i := range 3 {
		c.mustPublish(stream, payload(i))
	}

	for _, bad := range []struct {
		name string
		node string
		req  wire.HandoffRequest
		code string
	}{
		{"not a follower", "n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n3"}, wire.CodeBadRequest},
		{"to itself", "n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n1"}, wire.CodeBadRequest},
		{"other epoch", "n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 2, Target: "n2"}, wire.CodeNotOwner},
		{"other stream id", "n1", wire.HandoffRequest{Stream: stream, StreamID: id + 1, Epoch: 1, Target: "n2"}, wire.CodeNotOwner},
		{"not the owner", "n2", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n1"}, wire.CodeNotOwner},
	} {
		if r, e := c.handoff(bad.node, bad.req); e == nil || e.Code != bad.code {
			t.Fatalf("%s: reply %+v, error %v; want %s", bad.name, r, e, bad.code)
		}
	}

	// A resume takes publishes again at once.
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", HoldMS: 60_000}); e != nil {
		t.Fatal(e)
	}
	if _, e := c.publish(stream, payload(99), "", 0); e == nil || e.Code != wire.CodeSealed {
		t.Fatalf("publish while held: %v, want sealed", e)
	}
	if _, e := c.commitCursor(stream, "held", 1, 5*time.Second); e == nil || e.Code != wire.CodeSealed {
		t.Fatalf("cursor commit while held: %v, want sealed", e)
	}
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", Resume: true}); e != nil {
		t.Fatal(e)
	}
	c.mustPublish(stream, payload(3))

	// An expired hold takes publishes again too.
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: 100, HoldMS: 200}); e != nil {
		t.Fatal(e)
	}
	time.Sleep(300 * time.Millisecond)
	c.mustPublish(stream, payload(4))

	// Under load: the hand-off's tail is final and the target holds it.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var confirmed []wire.PublishConfirm
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				pc, e := c.publish(stream, payload(5), "", 0)
				if e == nil {
					mu.Lock()
					confirmed = append(confirmed, *pc)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // and a reader commits its cursor all along
		defer wg.Done()
		for i := uint64(1); !stop.Load(); i++ {
			_, _ = c.commitCursor(stream, "reader", min(i, 5), 5*time.Second)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	r, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: 2000, HoldMS: 10_000})
	if e != nil {
		t.Fatal(e)
	}
	time.Sleep(100 * time.Millisecond) // publishes go on meanwhile, refused
	var seals [2]*wire.SealReply
	for i, n := range []string{"n1", "n2"} {
		s, e := c.seal(n, stream, id, 2, 1)
		if e != nil {
			t.Fatalf("seal %s: %v", n, e)
		}
		seals[i] = s
	}
	if seals[0].RecordTail != r.RecordTail || seals[1].RecordTail != r.RecordTail || seals[0].Digest != r.Digest || seals[1].Digest != r.Digest {
		t.Fatalf("hand-off tail %d digest %s; sealed owner %d %s, target %d %s", r.RecordTail, r.Digest,
			seals[0].RecordTail, seals[0].Digest, seals[1].RecordTail, seals[1].Digest)
	}
	if seals[0].CursorTail != r.CursorTail || seals[1].CursorTail != r.CursorTail || r.CursorTail == 0 {
		t.Fatalf("hand-off cursor tail %d; sealed owner %d, target %d", r.CursorTail, seals[0].CursorTail, seals[1].CursorTail)
	}
	if r.RecordTail <= 5 {
		t.Fatalf("hand-off tail %d: the load wrote nothing", r.RecordTail)
	}
	c.assign(assignment(stream, id, 2, "n2", []string{"n1"},
		wire.HistoryStart{Epoch: 1, Node: "n1"}, wire.HistoryStart{Epoch: 2, RecordTail: r.RecordTail, CursorTail: r.CursorTail, Node: "n2"}))
	c.waitCopy("n2", stream, "target owns epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 2 })
	c.waitCopy("n1", stream, "old owner follows at epoch 2", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleFollower && cs.Epoch == 2 })
	testEventually(t, "a publish confirmed by the new owner", func() bool {
		pc, e := c.publish(stream, payload(6), "", 0)
		return e == nil && pc.Epoch == 2 && pc.Offset >= r.RecordTail
	})
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	for _, pc := range confirmed {
		if (pc.Offset >= r.RecordTail) != (pc.Epoch == 2) {
			t.Fatalf("confirm %+v: only the new owner confirms at or past the hand-off's tail %d", pc, r.RecordTail)
		}
	}
	mu.Unlock()

	// A target that cannot catch up: the hand-off times out and the owner
	// takes publishes again.
	c.hosts["n1"].stop()
	go func() { _, _ = c.publish(stream, payload(7), "", 0) }() // written, never confirmed
	own := c.hosts["n2"].h.lookupReplica(stream).status.Load().own
	testEventually(t, "the owner's tail past the stopped follower's ack", func() bool {
		rec, _, ack, _ := own.handoffTails("n1")
		return rec > ack
	})
	if _, e := c.handoff("n2", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 2, Target: "n1", TimeoutMS: 300}); e == nil || e.Code != wire.CodeTimeout {
		t.Fatalf("hand-off to a stopped follower: %v, want timeout", e)
	}
	if _, e := c.publish(stream, payload(8), "", 0); e == nil || e.Code == wire.CodeSealed {
		t.Fatalf("publish after the timed-out hand-off: %v, want taken (then confirm_timeout)", e)
	}
}

func testEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandoffHoldsCommitsAndOwnsItsHold: while a hand-off holds the
// owner's intake, cursor commits are refused with sealed like publishes
// (the target caught up to the cursor tail too, so it must stay the
// owner's last); a resume of another move leaves the hold alone, the
// move's own resume ends it; a timeout above the cap is a bad request.
func TestHandoffHoldsCommitsAndOwnsItsHold(t *testing.T) {
	const stream, id = "moveh", 8
	c := startPair(t, stream, id, nil)
	for i := range 3 {
		c.mustPublish(stream, payload(i))
	}
	if _, e := c.commitCursor(stream, "c1", 1, 2*time.Second); e != nil {
		t.Fatal(e)
	}
	req := wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: wire.MaxMoveTimeoutMS + 1}
	if _, e := c.handoff("n1", req); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("hand-off with timeout_ms above the cap: %v, want bad_request", e)
	}
	req.TimeoutMS, req.HoldMS, req.MoveID = 2000, 60_000, "m1"
	r, e := c.handoff("n1", req)
	if e != nil {
		t.Fatal(e)
	}
	if r.CursorTail < 1 {
		t.Fatalf("hand-off cursor tail %d: the commit before it is not in", r.CursorTail)
	}
	if _, e := c.commitCursor(stream, "c1", 2, 2*time.Second); e == nil || e.Code != wire.CodeSealed {
		t.Fatalf("commit while held: %v, want sealed", e)
	}
	own := c.hosts["n1"].h.lookupReplica(stream).status.Load().own
	if _, cur, _, _ := own.handoffTails("n2"); cur != r.CursorTail {
		t.Fatalf("cursor tail %d moved past the hand-off's %d", cur, r.CursorTail)
	}
	other := req
	other.MoveID = "m0"
	c.resumeOtherThenHolder(t, other, req)
	if _, e := c.commitCursor(stream, "c1", 2, 2*time.Second); e != nil {
		t.Fatalf("commit after the resume: %v", e)
	}
}

// TestHandoffConflictsWithAnotherMovesHold: a hand-off arriving while
// another move holds the owner answers conflict and leaves that hold alone
// (found by review: it replaced the hold, and the losing move's resume then
// released the winning move's hold before its seal).
func TestHandoffConflictsWithAnotherMovesHold(t *testing.T) {
	const stream, id = "movec", 9
	c := startPair(t, stream, id, nil)
	c.mustPublish(stream, payload(0))
	req := wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: 2000, HoldMS: 60_000, MoveID: "m1"}
	if _, e := c.handoff("n1", req); e != nil {
		t.Fatal(e)
	}
	again := req // the same move asking again holds as before
	if _, e := c.handoff("n1", again); e != nil {
		t.Fatalf("the same move's hand-off again: %v", e)
	}
	other := req
	other.MoveID = "m2"
	if r, e := c.handoff("n1", other); e == nil || e.Code != wire.CodeConflict {
		t.Fatalf("another move's hand-off while m1 holds: reply %+v, error %v; want conflict", r, e)
	}
	c.resumeOtherThenHolder(t, other, req) // the losing move resumes, as its mover does
	// Once m1's hold ended, another move may hold.
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: 2000, HoldMS: 60_000, MoveID: "m3"}); e != nil {
		t.Fatalf("a hand-off after the hold ended: %v", e)
	}
}

// resumeOtherThenHolder resumes, on n1, move other (which holds nothing):
// publishes are still refused; then move holder, which holds: they are
// taken again.
func (c *miniCluster) resumeOtherThenHolder(t *testing.T, other, holder wire.HandoffRequest) {
	t.Helper()
	other.Resume, holder.Resume = true, true
	if _, e := c.handoff("n1", other); e != nil {
		t.Fatal(e)
	}
	if _, e := c.publish(other.Stream, payload(9), "", 0); e == nil || e.Code != wire.CodeSealed {
		t.Fatalf("publish after move %q's resume: %v, want sealed (the hold is %q's)", other.MoveID, e, holder.MoveID)
	}
	if _, e := c.handoff("n1", holder); e != nil {
		t.Fatal(e)
	}
	c.mustPublish(holder.Stream, payload(10))
}

// TestPublishesAcrossTheSealAnswered: publishes that reach the owner's
// subscriptions while a planned move's seal ends its role are all
// answered (confirmed, or refused with a retryable code), and promptly:
// none is left for the client's request timeout (found by the balance
// bench: a publish across a move waited the client's whole timeout, the
// role's Unsubscribe having dropped the messages NATS had already handed
// to the subscription but its callback had not yet run).
func TestPublishesAcrossTheSealAnswered(t *testing.T) {
	const stream, id = "moves", 10
	const requestTimeout = 3 * time.Second // the balance bench's client
	c := startPair(t, stream, id, nil)
	c.mustPublish(stream, payload(0))
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: stream, StreamID: id, Epoch: 1, Target: "n2", TimeoutMS: 2000, HoldMS: 60_000, MoveID: "m"}); e != nil {
		t.Fatal(e)
	}
	nc, err := nats.Connect(c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nats.NewInbox()
	var answered atomic.Int64
	var bad atomic.Value
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		if e := replyError(m); e != nil && e.Code != wire.CodeSealed && e.Code != wire.CodeNotOwner {
			bad.Store(e.Code + ": " + e.Message)
		}
		answered.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A burst of publishes keeps the owner's subscription queue full while
	// the seal stops the role.
	const n = 5000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			if err := nc.PublishRequest(wire.PublishSubject(stream), fmt.Sprintf("%s.%d", inbox, i), payload(i)); err != nil {
				t.Error(err)
				return
			}
			if i == n/4 {
				_ = nc.Flush()
			}
		}
		_ = nc.Flush()
	}()
	testEventually(t, "some publishes answered", func() bool { return answered.Load() > 0 })
	if _, e := c.seal("n1", stream, id, 2, 1); e != nil {
		t.Fatalf("seal the owner: %v", e)
	}
	<-sent
	// Every publish is answered: by n1 while it subscribes, and with no
	// responders (a status reply from the server) once nobody does.
	deadline := time.Now().Add(requestTimeout / 3)
	for answered.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := bad.Load(); v != nil {
		t.Fatalf("a publish refused with a code that is not retryable across a move: %v", v)
	}
	if got := answered.Load(); got < n {
		t.Fatalf("%d of %d publishes sent across the seal answered within %v", got, n, requestTimeout/3)
	}
}
