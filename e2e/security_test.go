package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/e2e/internal/workload"
	pkgclient "github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/auth/authcheck"
)

// attack is one line of the security suite's report.
type attack struct {
	as, what, subject string
	want, got         string
	ok                bool
}

// TestSecurity runs a cluster with the generated credentials and
// permissions (tools/auth) under publish load and tries, as an
// application (the client credential) and as host h2, every attack issue
// 13 lists: fake confirms, forged seals and seal replies, forged
// assignment replies and notices, forged heartbeats (a dead owner kept
// alive, a healthy host leaving, new nodes), forged replication requests
// and batches, changing admin verbs, forged advisories and a connection
// that merely calls itself a host; as h2, heartbeats, seal answers,
// replication and a leave in h1's name. Each must be refused by
// nats-server (a permissions violation) or answered with a coded error.
// Afterwards no ownership moved, every node is live, the stream serves,
// and every confirmed record is read back at its offset. The report lists
// each attack and its outcome (docs/security.md shows it).
func TestSecurity(t *testing.T) {
	e := newEnv(t, opts{})
	if e.c.Auth() == nil {
		t.Fatal("the cluster runs without generated credentials")
	}
	const stream = "sec"
	before := e.createStream(stream, 3)
	a := before.Assignment
	owner, follower := a.Owner, a.Followers[0]
	// Host h2 attacks in host h1's name (whichever of them owns the
	// stream: the permissions do not depend on it).
	const h2, victim = "h2", "h1"

	led := workload.NewLedger()
	ld := e.load(stream, "sec", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, a.Epoch)

	connect := func(principal, name string) *authcheck.Conn {
		t.Helper()
		opts, err := e.c.NATSOptions(principal)
		if err != nil {
			t.Fatal(err)
		}
		c, err := authcheck.Connect(e.c.NATSURL(), principal, append(opts, nats.Name(name))...)
		if err != nil {
			t.Fatalf("connect as %s: %v", principal, err)
		}
		t.Cleanup(c.Close)
		return c
	}
	client := connect(auth.Client, "brook-security-client")
	host2 := connect(auth.HostPrincipal(h2), "brook-security-"+h2)

	var report []attack
	const wait = 2 * time.Second
	refused := func(c *authcheck.Conn, as, what, op, subject string) {
		t.Helper()
		if err := c.NC.Flush(); err != nil && !strings.Contains(err.Error(), "Permissions") {
			t.Logf("flush after %s: %v", what, err)
		}
		got := "delivered"
		if c.WaitViolation(op, subject, wait) {
			got = "refused (permissions violation)"
		}
		report = append(report, attack{as: as, what: what, subject: subject, want: "refused", got: got, ok: got != "delivered"})
	}
	publish := func(c *authcheck.Conn, as, what, subject string, body []byte) {
		t.Helper()
		if err := c.NC.Publish(subject, body); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		refused(c, as, what, "Publish", subject)
	}
	subscribe := func(c *authcheck.Conn, as, what, subject string, cb nats.MsgHandler) {
		t.Helper()
		if cb == nil {
			cb = func(*nats.Msg) {}
		}
		if _, err := c.NC.Subscribe(subject, cb); err != nil {
			t.Fatalf("subscribe %s: %v", subject, err)
		}
		refused(c, as, what, "Subscription", subject)
	}
	jsonOf := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hb := func(node string, leaving bool) []byte {
		return jsonOf(wire.Heartbeat{Node: node, Incarnation: 1, Leaving: leaving, Copies: []wire.CopyStatus{}, AtMS: time.Now().UnixMilli()})
	}

	// As an application.
	const as = "client"
	subscribe(client, as, "answer publishes with fake confirms", wire.PublishSubject(stream), func(m *nats.Msg) {
		_ = m.Respond(jsonOf(wire.PublishConfirm{StreamID: before.StreamID, Offset: 1 << 40, Epoch: a.Epoch, Copies: 3, W: 2}))
	})
	seal := jsonOf(wire.SealRequest{Stream: stream, StreamID: before.StreamID, FenceEpoch: 1 << 50, Transition: 1 << 50})
	publish(client, as, "seal a follower at a huge fence epoch", wire.SealSubject(follower), seal)
	subscribe(client, as, "answer a host's seals", wire.SealSubject(follower), nil)
	publish(client, as, "forge a seal reply (to a coordinator's inbox)", wire.InboxCoordinator+".forged", jsonOf(wire.SealReply{Node: follower, Stream: stream, FenceEpoch: 1 << 50}))
	publish(client, as, "forge an assignment pull reply (to a host's inbox)", wire.HostInbox(owner)+".forged", []byte(`{"version":1<<62,"streams":{}}`))
	publish(client, as, "forge an assignment notice", wire.AssignNoticeSubject(owner), []byte(`{"version":999999}`))
	publish(client, as, "heartbeat for the owner", wire.HeartbeatSubject(owner), hb(owner, false))
	publish(client, as, "heartbeat saying a healthy host leaves", wire.HeartbeatSubject(follower), hb(follower, true))
	publish(client, as, "heartbeat under a new node name", wire.HeartbeatSubject("h9"), hb("h9", false))
	repl := frame.AppendReplRequest(nil, &frame.ReplRequest{Node: follower, Epoch: a.Epoch, StreamID: before.StreamID, RecordTail: 1 << 30})
	publish(client, as, "replication request in a follower's name", wire.ReplicationSubject(stream, a.Epoch, follower), repl)
	publish(client, as, "forge a replication batch (to a follower's inbox)", wire.HostInbox(follower)+".forged",
		frame.AppendBatch(nil, &frame.Batch{Epoch: a.Epoch, Tail: 1 << 20, Confirmed: 1 << 20, Next: 0, Records: []frame.Record{{Offset: 0, Data: []byte{0, 'x'}}}}))
	for _, verb := range []string{wire.VerbStreamDelete, wire.VerbNodeDrain, wire.VerbNodeLeave, wire.VerbRecoveryAcceptLoss, wire.VerbRecoveryWithdraw, wire.VerbStreamCreate, wire.VerbStreamUpdate} {
		publish(client, as, "admin verb "+verb, wire.AdminSubject(verb), jsonOf(map[string]string{"stream": stream, "node": owner}))
	}
	publish(client, as, "leave in a host's name", wire.HostLeaveSubject(owner), jsonOf(map[string]string{"node": owner}))
	publish(client, as, "forge a disconnect advisory", "$SYS.ACCOUNT.BROOK.DISCONNECT",
		[]byte(`{"client":{"name":"brook-streamhost:`+owner+`","user":"U"}}`))
	subscribe(client, as, "listen to every heartbeat", wire.HeartbeatWildcard, nil)
	subscribe(client, as, "listen to another client's replies", "_INBOX.>", nil)

	// A connection that only calls itself the owner's host: its
	// disconnect advisory names the owner but carries the client's key.
	impostorOpts, err := e.c.NATSOptions(auth.Client)
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := nats.Connect(e.c.NATSURL(), append(impostorOpts, nats.Name("brook-streamhost:"+owner))...)
	if err != nil {
		t.Fatal(err)
	}
	impostor.Close()
	// Every coordinator hears the advisory and must say why it ignores it.
	const ignored = "disconnect advisory naming a stream host ignored: the connection authenticated with another key than the node's"
	heard := 0
	deadline := time.Now().Add(5 * time.Second)
	for heard < e.c.Coordinators() && time.Now().Before(deadline) {
		heard = 0
		for i := range e.c.Coordinators() {
			if data, err := os.ReadFile(e.c.Coordinator(i).LogPath); err == nil && strings.Contains(string(data), ignored) {
				heard++
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	report = append(report, attack{as: as, what: "connect as brook-streamhost:" + owner + " and disconnect", subject: "$SYS.ACCOUNT.BROOK.DISCONNECT (by the server)",
		want: "ignored", got: fmt.Sprintf("ignored by %d of %d coordinators (another key than %s's)", heard, e.c.Coordinators(), owner),
		ok: heard == e.c.Coordinators()})

	// As host h2, in h1's (the victim's) name.
	as2 := "host " + h2
	publish(host2, as2, "heartbeat as "+victim, wire.HeartbeatSubject(victim), hb(victim, true))
	subscribe(host2, as2, "answer "+victim+"'s seals", wire.SealSubject(victim), nil)
	publish(host2, as2, "replicate as "+victim, wire.ReplicationSubject(stream, a.Epoch, victim),
		frame.AppendReplRequest(nil, &frame.ReplRequest{Node: victim, Epoch: a.Epoch, StreamID: before.StreamID, RecordTail: 1 << 30}))
	publish(host2, as2, "host wait as "+victim, wire.HostReplSubject(owner, victim),
		frame.AppendHostWait(nil, &frame.HostWait{Node: victim, WaitMS: 1, Copies: []frame.HostWaitCopy{{StreamID: before.StreamID, Epoch: a.Epoch}}}))
	subscribe(host2, as2, "answer "+victim+"'s host waits", wire.HostReplWildcard(victim), nil)
	publish(host2, as2, "leave as "+victim, wire.HostLeaveSubject(victim), nil)
	publish(host2, as2, "forge a replication batch (to "+victim+"'s inbox)", wire.HostInbox(victim)+".forged", []byte{frame.Magic})

	// On its own subject, a request naming another node is answered with
	// a coded error by the owner: a replication request and a host wait.
	ownSubject := func(what, subject string, data []byte, answered string) {
		t.Helper()
		resp, err := host2.NC.Request(subject, data, 5*time.Second)
		got := fmt.Sprintf("error %v", err)
		ok := false
		if err == nil {
			code := resp.Header.Get(frame.HeaderError)
			got = "answered " + code
			ok = code == wire.CodeBadRequest
			if code == "" {
				got = answered
			}
		}
		report = append(report, attack{as: as2, what: what + " as " + victim + " on its own subject", subject: subject,
			want: "bad_request", got: got, ok: ok})
	}
	ownSubject("replicate", wire.ReplicationSubject(stream, a.Epoch, h2),
		frame.AppendReplRequest(nil, &frame.ReplRequest{Node: victim, Epoch: a.Epoch, StreamID: before.StreamID, RecordTail: 0, WaitMS: 1}), "served a batch")
	ownSubject("host wait", wire.HostReplSubject(owner, h2),
		frame.AppendHostWait(nil, &frame.HostWait{Node: victim, WaitMS: 1, Copies: []frame.HostWaitCopy{{StreamID: before.StreamID, Epoch: a.Epoch}}}), "answered a wake")

	// Positive control: the client credential publishes (to a stream of
	// its own, so the load's ledger stays exact).
	e.createStream("sec-client", 1)
	cl, err := pkgclient.Connect(e.ctx, e.c.NATSURL(), append(e.c.ClientOptions(auth.Client), pkgclient.WithName("brook-security-app"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	pc, err := cl.Publish(e.ctx, "sec-client", []byte("from a client"))
	report = append(report, attack{as: as, what: "publish (allowed)", subject: wire.PublishSubject("sec-client"),
		want: "confirmed", got: fmt.Sprintf("offset %d epoch %d err %v", pc.Offset, pc.Epoch, err), ok: err == nil && pc.StreamID != 0})

	// Long enough for forged heartbeats, leaves or advisories to act:
	// the TTL and the disconnect grace, with room.
	time.Sleep(ttl + time.Second)
	e.waitConfirms(led, 100, a.Epoch)
	e.stopLoad(ld, led)

	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "\tas\tattack\tsubject\twant\tgot")
	failed := 0
	for _, r := range report {
		mark := "ok"
		if !r.ok {
			mark, failed = "FAIL", failed+1
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", mark, r.as, r.what, r.subject, r.want, r.got)
	}
	_ = w.Flush()
	t.Logf("attacks and outcomes:\n%s", b.String())
	if failed > 0 {
		t.Errorf("%d attacks were not refused", failed)
	}

	after := e.info(stream)
	if after.Assignment.Epoch != a.Epoch || after.Assignment.Owner != owner || after.Status != wire.StatusServing {
		t.Errorf("the attacks moved the stream: before %s, after %s", describe(before), describe(after))
	}
	ci, err := e.cl.ClusterInfo(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ci.Nodes {
		if n.State != wire.NodeLive {
			t.Errorf("node %s is %s after the attacks", n.Node, n.State)
		}
		if n.Node == "h9" {
			t.Errorf("a forged heartbeat registered node h9")
		}
	}
	rd := workload.NewReader(e.cl, stream, "sec-reader")
	e.verify(stream, led, rd, workload.CheckConfig{})
}
