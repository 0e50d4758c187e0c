package host

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/linkconn"
	"github.com/brook-streams/brook/pkg/nettest"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// linkedCluster runs n1 owning stream s with followers n2 and n3, each
// host with a direct link.
func linkedCluster(t *testing.T) (*miniCluster, map[string]*testHost) {
	t.Helper()
	c := newMiniCluster(t)
	c.assign(assignment("s", 1, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	hosts := startLinkedHosts(t, c)
	c.waitCopy("n1", "s", "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	return c, hosts
}

// linkedClient connects a client with the client link and batching to
// url, and a context for its calls that ends with the test or in 60 s.
func linkedClient(t *testing.T, url string) (context.Context, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cl, err := client.Connect(ctx, url, client.WithDirectLink(true), client.WithBatching(time.Millisecond, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return ctx, cl
}

// startLinkedHosts starts n1, n2 and n3 in c, each with a direct link.
func startLinkedHosts(t *testing.T, c *miniCluster) map[string]*testHost {
	t.Helper()
	hosts := map[string]*testHost{}
	for _, n := range []string{"n1", "n2", "n3"} {
		hosts[n] = c.start(n, func(cfg *Config) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfg.ReplListener = ln
		})
	}
	return hosts
}

// clientConns returns the client connections h's direct link serves.
func clientConns(h *Host) []*linkConn {
	s := &h.direct.clients
	s.conns.RLock()
	defer s.conns.RUnlock()
	out := make([]*linkConn, 0, len(s.conns.m))
	for _, lc := range s.conns.m {
		out = append(out, lc)
	}
	return out
}

// TestClientPublishesOverTheClientLink: a client with WithDirectLink
// sends its publish batches on its own connection to the owner's host
// once it is up; every record is confirmed once, at its own offset, with
// producer ids kept; when the host drops the connection the records go on
// over the bus, and on a new connection after that; every confirmed
// record reads back once.
func TestClientPublishesOverTheClientLink(t *testing.T) {
	c, hosts := linkedCluster(t)
	ctx, cl := linkedClient(t, c.url)

	var mu sync.Mutex
	offsets := map[uint64]int{}
	seq := uint64(0)
	publish := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			mu.Lock()
			seq++
			s := seq
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				pc, err := cl.Publish(ctx, "s", payload(int(s)), client.WithProducer("p", s))
				if err != nil {
					errs <- fmt.Errorf("publish %d: %w", s, err)
					return
				}
				mu.Lock()
				offsets[pc.Offset]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	waitConns := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(clientConns(hosts["n1"].h)) != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("owner host serves %d client connections, want %d", len(clientConns(hosts["n1"].h)), want)
			}
			publish(1) // a batch with no way asks for one
		}
	}
	publish(20)
	waitConns(1)
	before := cl.LinkedBatches()
	publish(100)
	if got := cl.LinkedBatches() - before; got == 0 {
		t.Fatal("no batch went on the client link once it was up")
	}
	for _, n := range []string{"n2", "n3"} {
		if got := len(clientConns(hosts[n].h)); got != 0 {
			t.Errorf("follower host %s serves %d client connections", n, got)
		}
	}

	// The owner host drops the connection: publishing goes on, over the
	// bus and then on a new connection.
	for _, lc := range clientConns(hosts["n1"].h) {
		lc.close(errors.New("dropped by the test"))
	}
	publish(50)
	waitConns(1)
	publish(50)

	mu.Lock()
	defer mu.Unlock()
	for off, n := range offsets {
		if n != 1 {
			t.Errorf("offset %d confirmed %d times", off, n)
		}
	}
	if len(offsets) != int(seq) {
		t.Fatalf("%d offsets confirmed for %d records", len(offsets), seq)
	}
	recs := c.fetch("s", wire.FetchRequest{Start: "earliest", MaxRecords: int(seq) + 10})
	if len(recs.Records) != int(seq) {
		t.Fatalf("read back %d records, want %d", len(recs.Records), seq)
	}
	for _, r := range recs.Records {
		if offsets[r.Offset] != 1 {
			t.Fatalf("record at offset %d was never confirmed", r.Offset)
		}
	}
}

// helloOver sends a client link hello for stream naming fp over the bus.
func helloOver(t *testing.T, nc *nats.Conn, stream, fp string) (frame.ClientLinkHello, *wire.Error) {
	t.Helper()
	m := nats.NewMsg(wire.PublishBatchSubject(stream))
	m.Header.Set(frame.HeaderClientLink, fp)
	resp, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := replyError(resp); e != nil {
		return frame.ClientLinkHello{}, e
	}
	var hi frame.ClientLinkHello
	if err := json.Unmarshal(resp.Data, &hi); err != nil {
		t.Fatalf("hello answer %q: %v", resp.Data, err)
	}
	return hi, nil
}

// dialClient connects to the link at addr with cert as a client, and
// reports whether the host took it.
// helloedClientConn says hello for a new client certificate over c's bus
// (stream s) and dials the host that answered: a client link connection.
func helloedClientConn(t *testing.T, c *miniCluster) net.Conn {
	t.Helper()
	cert, fp, err := linkCertificate("client")
	if err != nil {
		t.Fatal(err)
	}
	hi, e := helloOver(t, c.nc, "s", fp)
	if e != nil {
		t.Fatal(e)
	}
	conn, ok := dialClient(t, hi.Addr, cert)
	if !ok {
		t.Fatal("the helloed certificate was refused")
	}
	return conn
}

func dialClient(t *testing.T, addr string, cert tls.Certificate) (net.Conn, bool) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{0}); err != nil {
		return conn, false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if isTimeout(err) {
			t.Fatal("a client connection was neither taken nor closed")
		}
		return conn, false
	}
	return conn, b[0] == frame.LinkReady
}

// linkRoundTrip sends m on a client connection and reads the reply.
// linkClientFrame is m as a client's request frame.
func linkClientFrame(m *frame.LinkMsg) []byte {
	body := frame.AppendLinkMsg(nil, m)
	f := binary.BigEndian.AppendUint32(nil, uint32(linkconn.HeaderLen-4+len(body)))
	f = append(f, frame.LinkClientRequest)
	f = binary.BigEndian.AppendUint64(f, 0)
	return append(f, body...)
}

func linkRoundTrip(t *testing.T, conn net.Conn, m *frame.LinkMsg) *frame.LinkMsg {
	t.Helper()
	if _, err := conn.Write(linkClientFrame(m)); err != nil {
		t.Fatal(err)
	}
	var hdr [linkconn.HeaderLen]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if hdr[4] != frame.LinkClientReply {
		t.Fatalf("reply frame kind %d", hdr[4])
	}
	rb := make([]byte, int(binary.BigEndian.Uint32(hdr[:4]))-(linkconn.HeaderLen-4))
	if _, err := io.ReadFull(conn, rb); err != nil {
		t.Fatal(err)
	}
	r, err := frame.DecodeLinkMsg(rb)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func header(m *frame.LinkMsg, key string) string {
	for _, h := range m.Header {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// TestClientLinkTakesOnlyAHelloedCertificateOnce: the host takes a client
// connection only with a certificate a hello over the bus named, and once
// per hello; a taken connection gets its publish batches written and
// confirmed, a 503 for a stream not owned here, and bad_request for
// anything but a publish batch.
func TestClientLinkTakesOnlyAHelloedCertificateOnce(t *testing.T) {
	c, hosts := linkedCluster(t)
	cert, fp, err := linkCertificate("client")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dialClient(t, hosts["n1"].h.direct.addr, cert); ok {
		t.Fatal("a client connection was taken with no hello")
	}
	if _, e := helloOver(t, c.nc, "s", "not-a-digest"); e == nil || e.Code != wire.CodeBadRequest {
		t.Fatalf("a hello naming no SHA-256 was answered %v", e)
	}
	hi, e := helloOver(t, c.nc, "s", fp)
	if e != nil {
		t.Fatal(e)
	}
	if hi.Node != "n1" || hi.Addr != hosts["n1"].h.direct.addr || hi.Cert != hosts["n1"].h.direct.fp {
		t.Fatalf("hello answered %+v", hi)
	}
	stranger, _, err := linkCertificate("client")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dialClient(t, hi.Addr, stranger); ok {
		t.Fatal("a certificate no hello named was taken")
	}
	conn, ok := dialClient(t, hi.Addr, cert)
	if !ok {
		t.Fatal("the helloed certificate was refused")
	}
	if _, ok := dialClient(t, hi.Addr, cert); ok {
		t.Fatal("one hello admitted two connections")
	}

	pb := frame.AppendPubBatch(nil, &frame.PubBatch{Records: []frame.PubRecord{{Data: []byte("a")}, {Data: []byte("b")}}})
	r := linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.PublishBatchSubject("s"), Reply: "inbox.1", Data: pb})
	if r.Subject != "inbox.1" || header(r, frame.HeaderError) != "" {
		t.Fatalf("batch reply %+v", r)
	}
	pr, err := frame.DecodePubReply(r.Data)
	if err != nil || len(pr.Results) != 2 || pr.Results[0].Offset != 0 || pr.Results[1].Offset != 1 {
		t.Fatalf("batch reply %+v, %v", pr, err)
	}
	if header(r, wire.HeaderStreamID) != "1" || header(r, wire.HeaderEpoch) != "1" {
		t.Fatalf("batch reply headers %+v", r.Header)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.PublishBatchSubject("other"), Reply: "inbox.2", Data: pb})
	if r.Subject != "inbox.2" || header(r, "Status") != "503" || len(r.Data) != 0 {
		t.Fatalf("a batch for a stream not owned here was answered %+v", r)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.PublishSubject("s"), Reply: "inbox.3", Data: []byte("x")})
	if r.Subject != "inbox.3" || header(r, frame.HeaderError) != wire.CodeBadRequest {
		t.Fatalf("a single publish on the link was answered %+v", r)
	}
	// A hello on the link itself is refused, and admits nothing: only the
	// bus's permissions admit a certificate.
	_, other, err := linkCertificate("client")
	if err != nil {
		t.Fatal(err)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.PublishBatchSubject("s"), Reply: "inbox.4",
		Header: []frame.LinkHeader{{Key: frame.HeaderClientLink, Value: other}}})
	if header(r, frame.HeaderError) != wire.CodeBadRequest {
		t.Fatalf("a hello on the link was answered %+v", r)
	}
	if hosts["n1"].h.direct.takeClientHello(other) {
		t.Fatal("a hello on the link admitted a certificate")
	}
	recs := c.fetch("s", wire.FetchRequest{Start: "earliest", MaxRecords: 10})
	if len(recs.Records) != 2 {
		t.Fatalf("read back %d records, want the batch's 2", len(recs.Records))
	}
	// A fetch on the link is answered on it, as on the bus: the records
	// and the stream id.
	fr, err := json.Marshal(wire.FetchRequest{Start: "earliest", MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.FetchSubject("s"), Reply: "inbox.5", Data: fr})
	if r.Subject != "inbox.5" || header(r, frame.HeaderError) != "" || header(r, wire.HeaderStreamID) != "1" {
		t.Fatalf("fetch reply %+v", r)
	}
	if b, err := frame.DecodeBatch(r.Data); err != nil || len(b.Records) != 2 || string(b.Records[1].Data) != "b" {
		t.Fatalf("fetch on the link: %+v, %v; want the batch's 2 records", b, err)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.FetchSubject("other"), Reply: "inbox.6", Data: fr})
	if header(r, "Status") != "503" {
		t.Fatalf("a fetch for a stream not owned here was answered %+v", r)
	}
	r = linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.CommitSubject("s"), Reply: "inbox.7", Data: []byte("{}")})
	if header(r, frame.HeaderError) != wire.CodeBadRequest {
		t.Fatalf("a cursor commit on the link was answered %+v", r)
	}
}

// onTheLink connects a client with the client link, one attempt per
// publish, and publishes to s until a batch went on the link; it is
// closed when the test ends.
func onTheLink(t *testing.T, ctx context.Context, c *miniCluster) *client.Client {
	t.Helper()
	cl, err := client.Connect(ctx, c.url, client.WithDirectLink(true), client.WithBatching(time.Millisecond, 0, 0), client.WithRetry(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	for deadline := time.Now().Add(10 * time.Second); cl.LinkedBatches() == 0; {
		if _, err := cl.Publish(ctx, "s", []byte("r")); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no batch went on the client link")
		}
	}
	return cl
}

// publishWithin publishes one record to s, giving up after d.
func publishWithin(ctx context.Context, cl *client.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := cl.Publish(ctx, "s", []byte("r"))
	return err
}

// TestClientLinkGoesBackToTheBusWhenABatchFails: a batch on the client
// link that is not confirmed whole (here its owner holds publishes for a
// hand-off, and refuses them sealed) sends the stream's next batches
// over the bus, which decides again who the owner is; after a second the
// client asks the owner over the bus again and goes back on the link.
func TestClientLinkGoesBackToTheBusWhenABatchFails(t *testing.T) {
	c, hosts := linkedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := onTheLink(t, ctx, c)
	publish := func() error {
		_, err := cl.Publish(ctx, "s", []byte("r"))
		return err
	}
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: "s", StreamID: 1, Epoch: 1, Target: "n2", HoldMS: 60_000}); e != nil {
		t.Fatal(e)
	}
	if err := publish(); wire.CodeOf(err) != wire.CodeSealed {
		t.Fatalf("publish while held: %v, want sealed", err)
	}
	if _, e := c.handoff("n1", wire.HandoffRequest{Stream: "s", StreamID: 1, Epoch: 1, Target: "n2", Resume: true}); e != nil {
		t.Fatal(e)
	}
	linked := cl.LinkedBatches()
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	if got := cl.LinkedBatches(); got != linked {
		t.Fatalf("the batch after the refused one went on the link (%d linked batches, were %d)", got, linked)
	}
	for deadline := time.Now().Add(10 * time.Second); cl.LinkedBatches() == linked; time.Sleep(50 * time.Millisecond) {
		if err := publish(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not go back on the link")
		}
	}
	if n := len(clientConns(hosts["n1"].h)); n != 1 {
		t.Fatalf("owner host serves %d client connections, want the first one still", n)
	}
}

// TestClientLinkGoesBackToTheBusWhenItsOwnerIsSlow: a batch on the link
// left unanswered (here the owner's followers are gone, so it cannot
// confirm) sends the stream's next batches over the bus after
// linkSlowAfter, while it keeps waiting for its own reply: an owner the
// bus no longer reaches, whose followers are being sealed, does not keep
// a client's publishes.
func TestClientLinkGoesBackToTheBusWhenItsOwnerIsSlow(t *testing.T) {
	c, hosts := linkedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := onTheLink(t, ctx, c)
	publish := func(d time.Duration) error { return publishWithin(ctx, cl, d) }
	hosts["n2"].stop()
	hosts["n3"].stop()
	linked := cl.LinkedBatches()
	if err := publish(time.Second); err == nil {
		t.Fatal("a publish was confirmed with both followers gone")
	}
	if got := cl.LinkedBatches(); got != linked+1 {
		t.Fatalf("%d batches went on the link, want the 1 sent while it was the way", got-linked)
	}
	if err := publish(300 * time.Millisecond); err == nil {
		t.Fatal("a publish was confirmed with both followers gone")
	}
	if got := cl.LinkedBatches(); got != linked+1 {
		t.Fatal("a batch went on the link after one there went unanswered for a second")
	}
}

// TestClientLinkDoesNotTakeASilentConnectionAgain: a connection on which
// a batch went unanswered with nothing read since (a path that drops
// everything and closes no socket: here a proxy that stops forwarding)
// sends the stream back to the bus and is not taken again when the
// client next asks the owner: publishing goes on over the bus.
func TestClientLinkDoesNotTakeASilentConnectionAgain(t *testing.T) {
	c := newMiniCluster(t)
	c.assign(assignment("s", 1, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	// Only n1 has the link, behind the proxy: its followers replicate
	// over the bus, and only the client's connection goes through it.
	var px *nettest.StallProxy
	c.start("n1", func(cfg *Config) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		px = nettest.NewStallProxy(t, ln.Addr().String())
		cfg.ReplListener, cfg.ReplAdvertise = ln, strings.TrimPrefix(px.URL(), "nats://")
	})
	c.start("n2", nil)
	c.start("n3", nil)
	c.waitCopy("n1", "s", "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := onTheLink(t, ctx, c)
	publish := func(d time.Duration) error { return publishWithin(ctx, cl, d) }
	px.Pause()
	defer px.Resume()
	// The proxy's read in progress still forwards one write: this
	// publish may be confirmed, the next one is not.
	_ = publish(time.Second)
	linked := cl.LinkedBatches()
	if err := publish(time.Second); err == nil {
		t.Fatal("a publish on a connection that forwards nothing was confirmed")
	}
	// The client asks the owner again a second after the drop; the
	// silent connection must not be its way then.
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if err := publish(2 * time.Second); err != nil {
			t.Fatalf("publishing after the connection went silent: %v", err)
		}
	}
	if got := cl.LinkedBatches(); got != linked+1 {
		t.Fatalf("%d batches went on the silent connection, want 1", got-linked)
	}
}

// TestClientLinkRefusesAnOversizedFrame: a client frame announcing more
// than a publish batch's limit (plus room for its subject and headers)
// closes the connection before the host reads or allocates it.
func TestClientLinkRefusesAnOversizedFrame(t *testing.T) {
	c, hosts := linkedCluster(t)
	conn := helloedClientConn(t, c)
	// 9 MiB: over a client's limit, far under the hosts' 64 MiB.
	f := binary.BigEndian.AppendUint32(nil, uint32(wire.MaxPublishBatchBytes+1<<20))
	f = append(f, frame.LinkClientRequest)
	f = binary.BigEndian.AppendUint64(f, 0)
	if _, err := conn.Write(f); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := conn.Read(b[:]); err == nil || isTimeout(err) {
		t.Fatalf("an oversized frame's connection was kept (read %d bytes, %v)", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(clientConns(hosts["n1"].h)) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host still counts the connection")
		}
	}
}

// TestClientFetchesOverTheClientLink: a client whose publishes to a stream
// have a client link connection fetches the stream on it too, a long poll
// at the tail included, and over the bus once the host drops the
// connection; a client that only reads a stream reads it over the bus.
func TestClientFetchesOverTheClientLink(t *testing.T) {
	c, hosts := linkedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := onTheLink(t, ctx, c)
	if _, err := cl.Publish(ctx, "s", []byte("last")); err != nil {
		t.Fatal(err)
	}
	b, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := len(b.Records)
	if n == 0 || string(b.Records[n-1].Data) != "last" || b.Records[0].Offset != 0 {
		t.Fatalf("fetch read %d records, ending %q; want every record from 0, ending \"last\"", n, b.Records[n-1].Data)
	}
	if got := cl.LinkedFetches(); got != 1 {
		t.Fatalf("%d fetches answered on the link, want 1", got)
	}

	// A long poll at the tail, answered on the link by the next record.
	type result struct {
		b   *frame.Batch
		err error
	}
	polled := make(chan result, 1)
	go func() {
		b, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "offset", Offset: uint64(n), MaxRecords: 10, WaitMS: 5000})
		polled <- result{b, err}
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := cl.Publish(ctx, "s", []byte("next")); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	if r.err != nil || len(r.b.Records) != 1 || string(r.b.Records[0].Data) != "next" || r.b.Records[0].Offset != uint64(n) {
		t.Fatalf("long poll at the tail: %+v, %v; want the next record at %d", r.b, r.err, n)
	}
	if got := cl.LinkedFetches(); got != 2 {
		t.Fatalf("%d fetches answered on the link, want 2", got)
	}

	// No batch confirmed on the connection for a second: fetches go over
	// the bus (a host that lost the stream without knowing it keeps no
	// reader), and back on the link after the next confirm.
	time.Sleep(1100 * time.Millisecond)
	if _, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cl.LinkedFetches(); got != 2 {
		t.Fatalf("%d fetches answered on the link, want still 2: no batch was confirmed on it for a second", got)
	}
	for deadline := time.Now().Add(10 * time.Second); cl.LinkedFetches() == 2; {
		if _, err := cl.Publish(ctx, "s", []byte("r")); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("fetches did not go back on the link after a batch was confirmed on it")
		}
	}
	b, err = cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n = len(b.Records) - 1 // as many as the bus will read below, less one

	// The host drops the connection: fetches go on over the bus.
	for _, lc := range clientConns(hosts["n1"].h) {
		lc.close(errors.New("dropped by the test"))
	}
	for deadline := time.Now().Add(5 * time.Second); len(clientConns(hosts["n1"].h)) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host kept the connection")
		}
	}
	if b, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1000}); err != nil || len(b.Records) != n+1 {
		t.Fatalf("fetch after the connection closed: %v records, %v; want %d", b, err, n+1)
	}
	linked := cl.LinkedFetches()
	if b, err := cl.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1}); err != nil || len(b.Records) != 1 {
		t.Fatalf("fetch after the connection closed: %v, %v", b, err)
	}
	if got := cl.LinkedFetches(); got != linked {
		t.Fatalf("a fetch was answered on a closed connection (%d linked, were %d)", got, linked)
	}

	// A client that only reads: over the bus.
	reader, err := client.Connect(ctx, c.url, client.WithDirectLink(true))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()
	if b, err := reader.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest", MaxRecords: 1000}); err != nil || len(b.Records) != n+1 {
		t.Fatalf("a reading client's fetch: %v, %v", b, err)
	}
	if got := reader.LinkedFetches(); got != 0 {
		t.Fatalf("a client that only reads had %d fetches answered on a link", got)
	}
}

// TestClientLinkFetchStopsAtTheWatermark: a fetch on the client link is
// bounded by the confirmed watermark as on the bus: a record the owner
// wrote but could not confirm (its followers are gone) is not read.
func TestClientLinkFetchStopsAtTheWatermark(t *testing.T) {
	c, hosts := linkedCluster(t)
	conn := helloedClientConn(t, c)
	pb := frame.AppendPubBatch(nil, &frame.PubBatch{Records: []frame.PubRecord{{Data: []byte("a")}}})
	if r := linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.PublishBatchSubject("s"), Reply: "inbox.1", Data: pb}); header(r, frame.HeaderError) != "" {
		t.Fatalf("batch reply %+v", r)
	}
	hosts["n2"].stop()
	hosts["n3"].stop()
	// Written by the owner, never confirmed: no reply is awaited.
	pb = frame.AppendPubBatch(nil, &frame.PubBatch{Records: []frame.PubRecord{{Data: []byte("b")}}})
	lm := frame.LinkMsg{Subject: wire.PublishBatchSubject("s"), Data: pb}
	if _, err := conn.Write(linkClientFrame(&lm)); err != nil {
		t.Fatal(err)
	}
	c.waitTails("n1", "s", "the second record written", func(t streamlog.Tails) bool { return t.RecordWritten >= 2 })
	fr, err := json.Marshal(wire.FetchRequest{Start: "earliest", MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	r := linkRoundTrip(t, conn, &frame.LinkMsg{Subject: wire.FetchSubject("s"), Reply: "inbox.2", Data: fr})
	b, err := frame.DecodeBatch(r.Data)
	if err != nil || header(r, frame.HeaderError) != "" {
		t.Fatalf("fetch reply %+v: %v", r, err)
	}
	if len(b.Records) != 1 || string(b.Records[0].Data) != "a" {
		t.Fatalf("fetch on the link read %d records; want only the confirmed one", len(b.Records))
	}
}

// TestClientLinkOneDialForManyStreams: a client that starts publishing to
// many streams of one owner host at once dials that host once; the learns
// of the other streams wait for that dial and take its connection, and the
// host refuses none (it admits one connection per hello and keeps one
// hello per certificate, so concurrent dials were all refused but one).
func TestClientLinkOneDialForManyStreams(t *testing.T) {
	const streams = 12
	c := newMiniCluster(t)
	var as []wire.AssignedStream
	for i := range streams {
		as = append(as, assignment(fmt.Sprintf("s%d", i), uint64(i+1), 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	}
	c.assign(as...)
	hosts := startLinkedHosts(t, c)
	for i := range streams {
		c.waitCopy("n1", fmt.Sprintf("s%d", i), "owner at epoch 1", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner && cs.Epoch == 1 })
	}
	ctx, cl := linkedClient(t, c.url)
	publishAll := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := cl.Publish(ctx, fmt.Sprintf("s%d", i), payload(i)); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	publishAll()
	// Every stream's learn has ended once all streams' batches go on the
	// link: until then a round of publishes starts the learns left.
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := cl.LinkedBatches()
		publishAll()
		if cl.LinkedBatches()-before == streams {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d streams' batches went on the client link", cl.LinkedBatches()-before, streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := hosts["n1"].h.direct.clientsRefused.Load(); n != 0 {
		t.Fatalf("the owner host refused %d of the client's connections", n)
	}
	if n := len(clientConns(hosts["n1"].h)); n != 1 {
		t.Fatalf("the owner host serves %d connections of the client, want 1", n)
	}
}
