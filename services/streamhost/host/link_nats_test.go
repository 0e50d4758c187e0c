package host

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/conngen"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// linkHost is the least of a host a replication link needs: its node, its
// connection and the connection's generation.
func linkHost(t *testing.T, url, node string) *Host {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &Host{nc: nc, conn: conngen.New(), cfg: Config{Node: node}, log: slog.New(slog.DiscardHandler)}
}

// linkUnderTest is a replication link's two ends for the contract test.
type linkUnderTest struct {
	owner  *Host
	ol, fl replLink
	// ready waits until the follower's requests travel the link under
	// test (a direct link falls back to the bus until it is up).
	ready func(t *testing.T)
	// lose drops the follower's way to the owner with requests in flight.
	lose func()
	// carried reports whether a request came over the link under test.
	carried func(replCall) bool
}

// TestNATSLinkKeepsTheContract checks natsLink against what replLink
// promises the follower, the owner and the host waits (transport.go): the
// sender as the link knows it, one answer per request and none per ack,
// nobody serving and a lost link told apart at once from a slow owner.
// TestDirectLinkKeepsTheContract runs the same checks on the direct link.
func TestNATSLinkKeepsTheContract(t *testing.T) {
	ns := startNATS(t, server.Options{})
	owner, follower := linkHost(t, ns.ClientURL(), "n1"), linkHost(t, ns.ClientURL(), "n2")
	testLinkContract(t, linkUnderTest{
		owner: owner,
		ol:    natsLink{h: owner}, fl: natsLink{h: follower},
		ready: func(*testing.T) {},
		lose:  follower.conn.Replaced,
		carried: func(c replCall) bool {
			_, ok := c.reply.(natsReply)
			return ok
		},
	})
	ns = startNATS(t, server.Options{})
	owner, follower = linkHost(t, ns.ClientURL(), "n1"), linkHost(t, ns.ClientURL(), "n2")
	testHostWaitContract(t, owner, follower, natsLink{h: owner}, natsLink{h: follower})
}

func testLinkContract(t *testing.T, lt linkUnderTest) {
	owner, ol, fl := lt.owner, lt.ol, lt.fl
	const stream, epoch = "s", uint64(3)
	ctx := context.Background()
	// The body names n3: from is the sender as the link knows it, never
	// what the body claims (the owner compares the two).
	req := frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "n3", Epoch: epoch, StreamID: 7, RecordTail: 5})
	to := fl.toOwner(stream, epoch, "n1")
	if ol.maxMessage() <= 0 || fl.maxMessage() <= 0 {
		t.Fatalf("message limit %d / %d, want the connection's", ol.maxMessage(), fl.maxMessage())
	}

	// Nobody serves the stream at its epoch yet: at once, not at the
	// timeout.
	start := time.Now()
	if _, err := to.request(ctx, req, 5*time.Second); !errors.Is(err, errNoServer) {
		t.Fatalf("request with no owner: %v, want errNoServer", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("no owner told after %v", took)
	}

	calls := make(chan replCall, 4)
	stop, err := ol.serve(stream, epoch, func(c replCall) { calls <- c })
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	lt.ready(t)

	// A request reaches the owner with its sender and is answered once
	// with a batch.
	answered := make(chan error, 1)
	var got replAnswer
	go func() {
		var err error
		got, err = to.request(ctx, req, 5*time.Second)
		answered <- err
	}()
	c := <-calls
	if c.from != "n2" || c.isAck() || string(c.data) != string(req) || !lt.carried(c) {
		t.Fatalf("request delivered from %q, ack %v, %d bytes, over the link under test %v; want from n2, answerable, the request",
			c.from, c.isAck(), len(c.data), lt.carried(c))
	}
	c.answer(&frame.Batch{Epoch: epoch, Head: 2, Tail: 9, Next: 5})
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if b, err := frame.DecodeBatch(got.data); got.code != "" || err != nil || b.Epoch != epoch || b.Tail != 9 || b.Next != 5 {
		t.Fatalf("answer code %q, batch %+v, err %v", got.code, b, err)
	}

	// A refusal comes back as its code and error reply.
	go func() {
		var err error
		got, err = to.request(ctx, req, 5*time.Second)
		answered <- err
	}()
	(<-calls).fail(wire.Errorf(wire.CodeStaleEpoch, "stale"))
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	var er wire.ErrorReply
	if err := json.Unmarshal(got.data, &er); got.code != wire.CodeStaleEpoch || err != nil || er.Error == nil || er.Error.Code != wire.CodeStaleEpoch {
		t.Fatalf("refusal: code %q, reply %s (%v)", got.code, got.data, err)
	}

	// An ack is delivered as one, and answering it sends nothing.
	if err := to.ack(req); err != nil {
		t.Fatal(err)
	}
	if c := <-calls; !c.isAck() || c.from != "n2" {
		t.Fatalf("ack delivered from %q as answerable %v", c.from, !c.isAck())
	} else {
		c.answer(&frame.Batch{}) // a no-op
	}

	// A request in flight whose link is replaced fails at once with
	// errLinkLost; its owner is slow, not gone.
	go func() {
		_, err := to.request(ctx, req, 5*time.Second)
		answered <- err
	}()
	parked := <-calls
	start = time.Now()
	lt.lose()
	if err := <-answered; !errors.Is(err, errLinkLost) {
		t.Fatalf("request whose link was replaced: %v, want errLinkLost", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("lost link told after %v", took)
	}
	parked.answer(&frame.Batch{}) // late: dropped
	lt.ready(t)

	// A slow owner is a timeout, and the follower's own end is its own.
	// (A direct link also takes a connection on which nothing came back
	// within the timeout for dead: the next request may dial again.)
	go func() {
		_, err := to.request(ctx, req, 200*time.Millisecond)
		answered <- err
	}()
	<-calls
	if err := <-answered; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request not answered within its timeout: %v", err)
	}
	lt.ready(t)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := to.request(cctx, req, 5*time.Second)
		answered <- err
	}()
	if c := <-calls; !lt.carried(c) {
		t.Fatal("request after the link came back went another way")
	}
	cancel()
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatalf("request whose follower stopped: %v", err)
	}

	// Once stopped, the stream at the epoch has nobody serving it.
	stop()
	if err := owner.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := to.request(ctx, req, 5*time.Second); !errors.Is(err, errNoServer) {
		t.Fatalf("request after the owner stopped serving: %v, want errNoServer", err)
	}

}

// testHostWaitContract checks the host waits of a link (ol at owner host
// n1, fl at follower host n2, neither serving anything yet).
func testHostWaitContract(t *testing.T, owner, follower *Host, ol, fl replLink) {
	ctx := context.Background()
	// Host waits: nobody serving them is told at once.
	hostTo := fl.toHost("n1")
	if _, err := hostTo.wait(ctx, hostWaitMsg{data: []byte{1}}, 5*time.Second); !errors.Is(err, errNoServer) {
		t.Fatalf("host wait with nobody serving: %v, want errNoServer", err)
	}
	// The sender, the generation and the records flag reach the owner
	// host, and the wake's generation comes back.
	waits := make(chan hostWaitCall, 1)
	stopWaits, err := ol.serveHostWaits(func(c hostWaitCall) { waits <- c })
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	hw := hostWaitMsg{data: frame.AppendHostWait(nil, &frame.HostWait{Node: "n3", WaitMS: 100}), gen: "4", records: true}
	woken := make(chan hostWaitAnswer, 1)
	go func() {
		a, err := fl.toHost("n1").wait(ctx, hw, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		woken <- a
	}()
	wc := <-waits
	if wc.from != "n2" || wc.gen != "4" || !wc.records || string(wc.data) != string(hw.data) || wc.reply == nil {
		t.Fatalf("host wait delivered from %q, gen %q, records %v, answerable %v", wc.from, wc.gen, wc.records, wc.reply != nil)
	}
	wake := frame.AppendHostWake(nil, &frame.HostWake{StreamIDs: []uint64{7}})
	wc.reply.wake(wake, "4")
	if a := <-woken; a.code != "" || a.gen != "4" || string(a.data) != string(wake) {
		t.Fatalf("wake answered code %q gen %q, %d bytes", a.code, a.gen, len(a.data))
	}
	// A change carries no generation of its own in the link.
	hw = hostWaitMsg{data: frame.AppendHostWaitChange(nil, &frame.HostWaitChange{Node: "n2", Base: 4, Gen: 5})}
	go func() {
		a, err := fl.toHost("n1").wait(ctx, hw, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		woken <- a
	}()
	wc = <-waits
	if wc.gen != "" || wc.records {
		t.Fatalf("change delivered with gen %q, records %v", wc.gen, wc.records)
	}
	wc.reply.fail(wire.Errorf(wire.CodeOverloaded, "busy"))
	if a := <-woken; a.code != wire.CodeOverloaded {
		t.Fatalf("refused host wait answered code %q", a.code)
	}

	// A host wait in flight whose link is replaced fails at once.
	lostWait := make(chan error, 1)
	go func() {
		_, err := hostTo.wait(ctx, hw, 5*time.Second)
		lostWait <- err
	}()
	<-waits
	start := time.Now()
	follower.conn.Replaced()
	if err := <-lostWait; !errors.Is(err, errLinkLost) || time.Since(start) > 2*time.Second {
		t.Fatalf("host wait whose link was replaced: %v after %v, want errLinkLost at once", err, time.Since(start))
	}

	// Once stopped, nothing more is delivered.
	stopWaits()
	if err := owner.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := hostTo.wait(ctx, hw, 5*time.Second); !errors.Is(err, errNoServer) {
		t.Fatalf("host wait after the owner host stopped serving them: %v, want errNoServer", err)
	}
	select {
	case c := <-waits:
		t.Fatalf("host wait from %s delivered after stop", c.from)
	default:
	}
}
