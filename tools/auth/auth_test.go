package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/brook-streams/brook/tools/auth"
	"github.com/brook-streams/brook/tools/auth/authcheck"
)

const (
	witnessUser = "witness"
	witnessPass = "witness-password"
	sysWitness  = "sys-witness"
)

var nodes = []string{"h1", "h2", "h3"}

// cluster is an embedded nats-server loaded from a generated deployment,
// plus one unrestricted witness user per account (added by the test, not
// part of the deployment) that observes what goes through.
type cluster struct {
	t      *testing.T
	d      *auth.Deployment
	srv    *server.Server
	url    string
	tlsOpt []nats.Option
}

func start(t *testing.T, spec auth.Spec) *cluster {
	t.Helper()
	d, err := auth.Generate(filepath.Join(t.TempDir(), "secrets"), spec)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	opts, err := server.ProcessConfigFile(d.NATSConf)
	if err != nil {
		t.Fatalf("the generated configuration does not load: %v", err)
	}
	opts.Host = "127.0.0.1"
	opts.Port = server.RANDOM_PORT
	opts.NoLog = true
	opts.NoSigs = true
	for _, a := range opts.Accounts {
		switch a.Name {
		case auth.AccountBrook:
			opts.Users = append(opts.Users, &server.User{Username: witnessUser, Password: witnessPass, Account: a})
		case auth.AccountSys:
			opts.Users = append(opts.Users, &server.User{Username: sysWitness, Password: witnessPass, Account: a})
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	c := &cluster{t: t, d: d, srv: srv, url: srv.ClientURL()}
	if spec.TLS {
		c.url = strings.Replace(c.url, "nats://", "tls://", 1)
		c.tlsOpt = []nats.Option{nats.RootCAs(d.CAFile)}
	}
	return c
}

// as connects as principal name, with its seed, inbox prefix and (TLS)
// client certificate.
func (c *cluster) as(name string) *authcheck.Conn {
	c.t.Helper()
	p, ok := c.d.Principal(name)
	if !ok {
		c.t.Fatalf("no principal %s", name)
	}
	nk, err := nats.NkeyOptionFromSeed(p.SeedFile)
	if err != nil {
		c.t.Fatalf("seed of %s: %v", name, err)
	}
	opts := append([]nats.Option{nk, nats.CustomInboxPrefix(p.InboxPrefix)}, c.tlsOpt...)
	if p.CertFile != "" {
		opts = append(opts, nats.ClientCert(p.CertFile, p.KeyFile))
	}
	return c.connect(name, opts...)
}

func (c *cluster) connect(label string, opts ...nats.Option) *authcheck.Conn {
	c.t.Helper()
	conn, err := authcheck.Connect(c.url, label, opts...)
	if err != nil {
		c.t.Fatalf("%v", err)
	}
	c.t.Cleanup(conn.Close)
	return conn
}

func (c *cluster) witness(account string) *authcheck.Conn {
	user := witnessUser
	if account == auth.AccountSys {
		user = sysWitness
	}
	opts := append([]nats.Option{nats.UserInfo(user, witnessPass)}, c.tlsOpt...)
	if c.d.TLS {
		// Any certificate of the CA will do; the password names the user.
		p, _ := c.d.Principal(auth.Admin)
		opts = append(opts, nats.ClientCert(p.CertFile, p.KeyFile))
	}
	return c.connect("witness-"+account, opts...)
}

// table runs permission checks; every line's outcome is logged.
type table struct {
	t      *testing.T
	p      authcheck.Prober
	checks []authcheck.Check
}

func (tb *table) add(who *authcheck.Conn, op, subject string, want authcheck.Outcome, got authcheck.Outcome, detail string) {
	tb.checks = append(tb.checks, authcheck.Check{Principal: who.Name, Op: op, Subject: subject, Want: want, Got: got, Detail: detail})
}

func (tb *table) pub(who *authcheck.Conn, subject string, want authcheck.Outcome, witness *authcheck.Conn) {
	got, detail := tb.p.Publish(who, subject, witness)
	tb.add(who, "pub", subject, want, got, detail)
}

func (tb *table) sub(who *authcheck.Conn, subject, sample string, want authcheck.Outcome, witness *authcheck.Conn) {
	got, detail := tb.p.Subscribe(who, subject, sample, witness)
	tb.add(who, "sub", subject, want, got, detail)
}

func (tb *table) req(who *authcheck.Conn, subject string, want authcheck.Outcome, responder *authcheck.Conn) {
	got, detail := tb.p.Request(who, subject, responder)
	tb.add(who, "request→"+responder.Name, subject, want, got, detail+" ")
}

func (tb *table) report() {
	tb.t.Helper()
	failed := 0
	for _, c := range tb.checks {
		if !c.OK() {
			failed++
		}
	}
	tb.t.Logf("permission checks:\n%s", authcheck.Table(tb.checks))
	if failed > 0 {
		tb.t.Errorf("%d of %d permission checks have another outcome than wanted", failed, len(tb.checks))
	}
}

const (
	allowed = authcheck.Allowed
	refused = authcheck.Refused
)

// TestPermissions checks each principal's allowed and refused operations
// against a server loaded from the generated configuration.
func TestPermissions(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes})
	w := c.witness(auth.AccountBrook)
	client, admin := c.as(auth.Client), c.as(auth.Admin)
	coord, att := c.as(auth.Coordinator), c.as(auth.Attention)
	h1, h2 := c.as(auth.HostPrincipal("h1")), c.as(auth.HostPrincipal("h2"))
	tb := &table{t: t, p: authcheck.Prober{Timeout: time.Second}}

	// client: the data plane and the read-only verbs, answered by their
	// responders; nothing else.
	for _, s := range []string{"brook.s.x.pub", "brook.s.x.pubb", "brook.s.x.fetch", "brook.s.x.commit"} {
		tb.req(client, s, allowed, h1)
	}
	for _, s := range []string{"brook.admin.stream.info", "brook.admin.stream.list", "brook.admin.cluster.info"} {
		tb.req(client, s, allowed, coord)
	}
	tb.req(client, "brook.attention.list", allowed, att)
	tb.req(client, "brook.admin.stream.delete", refused, coord)
	tb.req(client, "brook.admin.stream.create", refused, coord)
	tb.pub(client, "brook.s.x.pub", allowed, w)
	for _, s := range []string{
		"brook.host.h1.seal", "brook.host.h1.seals", "brook.hb.h1", "brook.admin.stream.delete", "brook.admin.node.leave",
		"brook.assign.h1", "brook.assignments.pull", "brook.host.h1.leave", "brook.s.x.repl.1.h1", "brook.s.x.owner.h1", "brook.hostrepl.h1.h2",
		"_INBOX.anything", "_INBOX.client.x", "_INBOX.coord.x", "$SYS.REQ.SERVER.PING",
	} {
		tb.pub(client, s, refused, w)
	}
	tb.sub(client, "_INBOX.client.>", "_INBOX.client.abc.1", allowed, w)
	tb.sub(client, "brook.s.x.owner.*", "brook.s.x.owner.h1", allowed, w)
	for _, s := range [][2]string{
		{"brook.s.x.pub", "brook.s.x.pub"}, {"brook.s.>", "brook.s.x.fetch"}, {"brook.hb.*", "brook.hb.h1"},
		{"_INBOX.>", "_INBOX.coord.abc"}, {"_INBOX.admin.>", "_INBOX.admin.abc"}, {">", "brook.x"},
	} {
		tb.sub(client, s[0], s[1], refused, w)
	}

	// admin: the client's and every admin verb.
	for _, s := range []string{"brook.admin.stream.delete", "brook.admin.stream.create", "brook.admin.node.leave", "brook.admin.stream.info"} {
		tb.req(admin, s, allowed, coord)
	}
	tb.req(admin, "brook.s.x.pub", allowed, h1)
	tb.req(admin, "brook.s.x.pubb", allowed, h1)
	for _, s := range []string{"brook.hb.h1", "brook.host.h1.seal", "brook.host.h1.seals", "brook.assign.h1", "_INBOX.admin.x", "_INBOX.x"} {
		tb.pub(admin, s, refused, w)
	}
	tb.sub(admin, "_INBOX.admin.>", "_INBOX.admin.abc", allowed, w)
	tb.sub(admin, "_INBOX.client.>", "_INBOX.client.abc", refused, w)
	tb.sub(admin, "brook.admin.>", "brook.admin.stream.delete", refused, w)

	// host h1: its own heartbeat, pull, leave and replication requests.
	tb.pub(h1, "brook.hb.h1", allowed, w)
	tb.req(h1, "brook.assignments.pull", allowed, coord)
	tb.req(h1, "brook.host.h1.leave", allowed, coord)
	tb.req(h1, "brook.s.x.repl.1.h1", allowed, h2)
	tb.req(h1, "brook.hostrepl.h2.h1", allowed, h2) // its host wait, answered by the owner host
	tb.sub(h1, "brook.s.>", "brook.s.x.pub", allowed, w)
	tb.sub(h1, "brook.assign.h1", "brook.assign.h1", allowed, w)
	tb.sub(h1, "brook.host.h1.seal", "brook.host.h1.seal", allowed, w)
	tb.sub(h1, "brook.host.h1.seals", "brook.host.h1.seals", allowed, w)
	tb.sub(h1, "brook.host.h1.probe", "brook.host.h1.probe", allowed, w)
	tb.sub(h1, "_INBOX.host.h1.>", "_INBOX.host.h1.abc", allowed, w)

	// host h2 may not speak for h1.
	tb.pub(h2, "brook.s.x.repl.1.h2", allowed, w)
	tb.pub(h2, "brook.s.x.owner.h2", allowed, w)
	tb.pub(h2, "brook.hostrepl.h1.h2", allowed, w)
	for _, s := range []string{
		"brook.hostrepl.h1.h1", "brook.hostrepl.h3.h1", "brook.hostrepl.h2.h1",
		"brook.hb.h1", "brook.s.x.repl.1.h1", "brook.s.x.owner.h1", "brook.host.h1.leave", "brook.assign.h1", "brook.host.h1.seal", "brook.host.h1.seals",
		"brook.s.x.pub", "brook.s.x.fetch", "brook.admin.node.leave", "brook.admin.stream.list", "_INBOX.client.x",
		"_INBOX.host.h2.x",
	} {
		tb.pub(h2, s, refused, w)
	}
	for _, s := range [][2]string{
		{"brook.host.h1.seal", "brook.host.h1.seal"}, {"brook.host.h1.seals", "brook.host.h1.seals"},
		{"brook.host.*.seals", "brook.host.h1.seals"}, {"brook.assign.h1", "brook.assign.h1"},
		{"brook.host.h1.probe", "brook.host.h1.probe"}, {"brook.host.*.probe", "brook.host.h1.probe"},
		{"brook.assign.*", "brook.assign.h1"}, {"brook.hb.*", "brook.hb.h1"}, {"_INBOX.host.h1.>", "_INBOX.host.h1.abc"},
		{"brook.hostrepl.h1.*", "brook.hostrepl.h1.h3"}, {"brook.hostrepl.>", "brook.hostrepl.h1.h3"},
		{"_INBOX.client.>", "_INBOX.client.abc"}, {"brook.admin.>", "brook.admin.stream.create"},
	} {
		tb.sub(h2, s[0], s[1], refused, w)
	}

	// coordinator: notices, seals and the owner probe; the control plane's
	// subscriptions.
	tb.pub(coord, "brook.assign.h1", allowed, w)
	tb.req(coord, "brook.host.h1.seal", allowed, h1)
	tb.req(coord, "brook.host.h1.seals", allowed, h1)
	tb.req(coord, "brook.host.h1.probe", allowed, h1)
	tb.req(coord, "brook.s.x.fetch", allowed, h1)
	for _, s := range []string{"brook.s.x.pub", "brook.s.x.commit", "brook.hb.h1", "brook.admin.stream.delete", "brook.s.x.repl.1.h1", "_INBOX.client.x"} {
		tb.pub(coord, s, refused, w)
	}
	for _, s := range [][2]string{
		{"brook.admin.>", "brook.admin.stream.delete"}, {"brook.hb.*", "brook.hb.h3"},
		{"brook.host.*.leave", "brook.host.h3.leave"}, {"brook.assignments.pull", "brook.assignments.pull"},
		{"_INBOX.coord.>", "_INBOX.coord.abc"},
	} {
		tb.sub(coord, s[0], s[1], allowed, w)
	}
	tb.sub(coord, "brook.s.>", "brook.s.x.pub", refused, w)
	tb.sub(coord, "brook.host.*.seal", "brook.host.h1.seal", refused, w)
	tb.sub(coord, "brook.host.*.seals", "brook.host.h1.seals", refused, w)
	tb.sub(coord, "brook.host.*.probe", "brook.host.h1.probe", refused, w)

	// attention: reads heartbeats and notices, pulls the list.
	tb.req(att, "brook.admin.stream.list", allowed, coord)
	tb.req(att, "brook.admin.cluster.info", allowed, coord)
	tb.req(att, "brook.admin.attention.clear", refused, coord)
	for _, s := range []string{"brook.hb.h1", "brook.assign.h1", "brook.s.x.pub", "_INBOX.attention.x"} {
		tb.pub(att, s, refused, w)
	}
	for _, s := range [][2]string{
		{"brook.hb.*", "brook.hb.h1"}, {"brook.assign.*", "brook.assign.h2"}, {"brook.attention.list", "brook.attention.list"},
	} {
		tb.sub(att, s[0], s[1], allowed, w)
	}
	tb.sub(att, "brook.s.>", "brook.s.x.pub", refused, w)
	tb.sub(att, "brook.admin.>", "brook.admin.stream.list", refused, w)

	// The advisory listener, in the system account.
	sw := c.witness(auth.AccountSys)
	sys := c.as(auth.CoordinatorSys)
	tb.sub(sys, "$SYS.ACCOUNT.BROOK.DISCONNECT", "$SYS.ACCOUNT.BROOK.DISCONNECT", allowed, sw)
	tb.sub(sys, "$SYS.ACCOUNT.BROOK.CONNECT", "$SYS.ACCOUNT.BROOK.CONNECT", allowed, sw)
	for _, s := range [][2]string{
		{"$SYS.ACCOUNT.>", "$SYS.ACCOUNT.BROOK.DISCONNECT"}, {"$SYS.ACCOUNT.SYS.DISCONNECT", "$SYS.ACCOUNT.SYS.DISCONNECT"},
		{"$SYS.REQ.>", "$SYS.REQ.SERVER.PING"}, {">", "brook.x"}, {"_INBOX.coordsys.>", "_INBOX.coordsys.x"},
	} {
		tb.sub(sys, s[0], s[1], refused, sw)
	}
	for _, s := range []string{"$SYS.REQ.SERVER.PING", "$SYS.REQ.ACCOUNT.BROOK.CONNZ", "brook.x", "_INBOX.x", "$SYS.ACCOUNT.BROOK.DISCONNECT"} {
		tb.pub(sys, s, refused, sw)
	}
	tb.report()
}

// TestForgedReplies: only the connection that received a request may
// answer it, once.
func TestForgedReplies(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes})
	coord, client := c.as(auth.Coordinator), c.as(auth.Client)
	other := c.as(auth.Client) // another application, same principal
	h1, h2 := c.as(auth.HostPrincipal("h1")), c.as(auth.HostPrincipal("h2"))
	tb := &table{t: t, p: authcheck.Prober{Timeout: time.Second}}

	// A seal request to h1, alone or batched: h2 and a client cannot
	// answer it, h1 can, once.
	for _, subj := range []string{"brook.host.h1.seal", "brook.host.h1.seals"} {
		inbox := coord.NC.NewInbox()
		seals, err := h1.NC.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		if err := h1.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := coord.NC.PublishRequest(subj, inbox, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		req, err := seals.NextMsg(time.Second)
		if err != nil {
			t.Fatalf("h1 got no request on %s: %v", subj, err)
		}
		tb.pub(h2, inbox, refused, coord)
		tb.pub(client, inbox, refused, coord)
		tb.pub(h1, req.Reply, allowed, coord)
		tb.pub(h1, req.Reply, refused, coord) // allow_responses: one reply
	}

	// An admin request of one application: another cannot answer it.
	admin, err := coord.NC.SubscribeSync("brook.admin.stream.info")
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	cinbox := client.NC.NewInbox()
	if err := client.NC.PublishRequest("brook.admin.stream.info", cinbox, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NextMsg(time.Second); err != nil {
		t.Fatalf("the coordinator got no admin request: %v", err)
	}
	tb.pub(other, cinbox, refused, client)
	tb.pub(h2, cinbox, refused, client)
	tb.report()
}

// TestDesignLimitations pins what the design's static permissions cannot
// prevent, so that a change to them is noticed: every host subscribes to
// every stream's data plane (ownership moves), so any host receives a
// client's publish and may answer it; and all applications share one
// principal, so one may read another's replies.
func TestDesignLimitations(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes})
	client, other := c.as(auth.Client), c.as(auth.Client)
	h2 := c.as(auth.HostPrincipal("h2"))
	tb := &table{t: t, p: authcheck.Prober{Timeout: time.Second}}
	tb.req(client, "brook.s.x.pub", allowed, h2) // h2 need not own x
	tb.sub(other, "_INBOX.client.>", client.NC.NewInbox(), allowed, c.witness(auth.AccountBrook))
	tb.report()
}

// TestDisconnectAdvisory: the advisory listener hears a BROOK connection
// close, with the connection's nkey, which is how the coordinators tell a
// host's advisory from one a client forged with the host's name.
func TestDisconnectAdvisory(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes})
	sys := c.as(auth.CoordinatorSys)
	sub, err := sys.NC.SubscribeSync("$SYS.ACCOUNT.BROOK.DISCONNECT")
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	h1p, _ := c.d.Host("h1")
	clientp, _ := c.d.Principal(auth.Client)
	for _, tc := range []struct{ principal, key string }{{h1p.Name, h1p.PublicKey}, {auth.Client, clientp.PublicKey}} {
		p, _ := c.d.Principal(tc.principal)
		nk, err := nats.NkeyOptionFromSeed(p.SeedFile)
		if err != nil {
			t.Fatal(err)
		}
		// Both claim to be h1's stream host: only the nkey tells them apart.
		nc, err := nats.Connect(c.url, nk, nats.Name("brook-streamhost:h1"), nats.CustomInboxPrefix(p.InboxPrefix))
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no disconnect advisory after %s closed: %v", tc.principal, err)
		}
		// nats-server's ClientInfo has no "nkey" field: an nkey user's
		// public key is its "user".
		var adv struct {
			Client struct {
				Name string `json:"name"`
				User string `json:"user"`
				Acc  string `json:"acc"`
			} `json:"client"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Fatalf("advisory: %v", err)
		}
		if adv.Client.Name != "brook-streamhost:h1" || adv.Client.User != tc.key || adv.Client.Acc != auth.AccountBrook {
			t.Errorf("%s's advisory names %q user %q account %q; want brook-streamhost:h1, %q, BROOK",
				tc.principal, adv.Client.Name, adv.Client.User, adv.Client.Acc, tc.key)
		}
	}
	if errs := sys.Errors(); len(errs) > 0 {
		t.Errorf("advisory listener errors: %v", errs)
	}
}

// TestNoAnonymousAccess: only the deployment's nkeys get in.
func TestNoAnonymousAccess(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes})
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := stranger.Seed()
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(strangerFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	nk, err := nats.NkeyOptionFromSeed(strangerFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"no credentials":       nil,
		"the old brook user":   {nats.UserInfo("brook", "brook")},
		"the old sys user":     {nats.UserInfo("sys", "sys")},
		"an unknown nkey":      {nk},
		"a token":              {nats.Token("brook")},
		"a user named by nkey": {nats.UserInfo(mustPrincipal(t, c.d, auth.Client).PublicKey, "")},
	} {
		if nc, err := nats.Connect(c.url, append(opts, nats.NoReconnect())...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
}

// TestLimits: the account limits reach the connections.
func TestLimits(t *testing.T) {
	c := start(t, auth.Spec{Nodes: nodes, Limits: auth.Limits{MaxConnections: 3}})
	if got, want := c.as(auth.Client).NC.MaxPayload(), int64(auth.DefaultLimits.MaxPayload); got != want {
		t.Errorf("BROOK max payload %d, want %d", got, want)
	}
	// The server announces its own max_payload; it enforces the account's
	// smaller one, closing the connection of a bigger publish.
	// A client that already heard the account's limit in an updated INFO
	// (a race with the connect) refuses the publish itself.
	sys := c.as(auth.CoordinatorSys)
	err := sys.NC.Publish("brook.x", make([]byte, auth.SysLimits.MaxPayload+1))
	if err != nil && !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatal(err)
	}
	_ = sys.NC.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for err == nil && !sys.NC.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		if got := sys.NC.MaxPayload(); got != int64(auth.SysLimits.MaxPayload) {
			t.Errorf("the client refused the SYS publish with a max payload of %d, want %d", got, auth.SysLimits.MaxPayload)
		}
	} else if err := sys.NC.LastError(); !sys.NC.IsClosed() || err == nil || !strings.Contains(strings.ToLower(err.Error()), "maximum payload") {
		t.Errorf("SYS publish over %d bytes: closed %v, error %v; want closed by a maximum payload violation",
			auth.SysLimits.MaxPayload, sys.NC.IsClosed(), err)
	}
	// client, admin and coordinator are three BROOK connections (no
	// witness here); a fourth is refused.
	c.as(auth.Admin)
	c.as(auth.Coordinator)
	p := mustPrincipal(t, c.d, auth.Attention)
	nk, err := nats.NkeyOptionFromSeed(p.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(c.url, nk, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Error("a fourth BROOK connection got in; max_connections is 3")
	}
}

// TestGeneratedFiles: the files, their modes, and the exact permission
// table of the design, as the server parsed it.
func TestGeneratedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	d, err := auth.Generate(dir, auth.Spec{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir: %v %v, want mode 0700", fi.Mode(), err)
	}
	want := []string{"admin.nk", "attention.nk", "auth.conf", "client.nk", "coordinator-sys.nk", "coordinator.nk",
		"deployment.json", "host-h1.nk", "host-h2.nk", "host-h3.nk", "host-keys.json", "nats.conf"}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
		fi, err := e.Info()
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v, want 0600", e.Name(), fi.Mode(), err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	var files []string
	for _, f := range d.Files() {
		files = append(files, filepath.Base(f))
	}
	sort.Strings(files)
	if !reflect.DeepEqual(files, want) {
		t.Errorf("Deployment.Files %v, want %v", files, want)
	}

	// Seeds match the public keys; no seed in the shared files.
	for _, p := range d.Principals {
		data, err := os.ReadFile(p.SeedFile)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := nkeys.ParseDecoratedNKey(data)
		if err != nil {
			t.Fatalf("%s: %v", p.SeedFile, err)
		}
		if pub, _ := kp.PublicKey(); pub != p.PublicKey || !strings.HasPrefix(pub, "U") {
			t.Errorf("%s: public key %s, deployment says %s", p.Name, pub, p.PublicKey)
		}
	}
	for _, f := range []string{d.AuthConf, d.NATSConf, d.HostKeys, filepath.Join(dir, auth.DeploymentFile)} {
		data, _ := os.ReadFile(f)
		for _, p := range d.Principals {
			seed, _ := os.ReadFile(p.SeedFile)
			if strings.Contains(string(data), strings.TrimSpace(string(seed))) {
				t.Errorf("%s holds %s's seed", f, p.Name)
			}
		}
	}
	var keys map[string]string
	data, err := os.ReadFile(d.HostKeys)
	if err != nil || json.Unmarshal(data, &keys) != nil {
		t.Fatalf("host-keys.json: %v %s", err, data)
	}
	for _, n := range nodes {
		if p, _ := d.Host(n); keys[n] != p.PublicKey || keys[n] == "" {
			t.Errorf("host-keys.json %s = %q, want %q", n, keys[n], p.PublicKey)
		}
	}
	if len(keys) != len(nodes) {
		t.Errorf("host-keys.json has %d keys, want %d", len(keys), len(nodes))
	}

	// Load reads it back; a second Generate refuses, Overwrite replaces.
	l, err := auth.Load(dir)
	if err != nil || !reflect.DeepEqual(l, d) {
		t.Errorf("Load: %v\n%+v\nwant %+v", err, l, d)
	}
	if _, err := auth.Generate(dir, auth.Spec{Nodes: nodes}); !errors.Is(err, auth.ErrExists) {
		t.Errorf("second Generate: %v, want ErrExists", err)
	}
	d2, err := auth.Generate(dir, auth.Spec{Nodes: nodes, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if p1, _ := d.Principal(auth.Client); p1.PublicKey == mustPrincipal(t, d2, auth.Client).PublicKey {
		t.Error("Overwrite kept the client's key")
	}
	for _, bad := range [][]string{nil, {"h1", "h1"}, {"h.1"}, {"h*"}, {""}} {
		if _, err := auth.Generate(t.TempDir(), auth.Spec{Nodes: bad}); err == nil {
			t.Errorf("nodes %q accepted", bad)
		}
	}

	// The design's table, written out independently of the package.
	type perm struct {
		account        string
		pub, deny, sub []string
		responses      bool
	}
	inbox := []string{"_INBOX.>"}
	client := []string{"brook.s.*.pub", "brook.s.*.pubb", "brook.s.*.fetch", "brook.s.*.commit", "brook.admin.stream.info",
		"brook.admin.stream.list", "brook.admin.cluster.info", "brook.attention.list"}
	design := map[string]perm{
		auth.Client: {"BROOK", client, inbox, []string{"_INBOX.client.>", "brook.s.*.owner.*"}, false},
		auth.Admin:  {"BROOK", append(append([]string{}, client...), "brook.admin.>"), inbox, []string{"_INBOX.admin.>", "brook.s.*.owner.*"}, false},
		auth.Coordinator: {"BROOK", []string{"brook.assign.*", "brook.host.*.seal", "brook.host.*.seals", "brook.host.*.handoff", "brook.host.*.probe", "brook.s.*.fetch"}, inbox,
			[]string{"brook.admin.>", "brook.assignments.pull", "brook.hb.*", "brook.host.*.leave", "_INBOX.coord.>"}, true},
		auth.CoordinatorSys: {"SYS", nil, []string{">"}, []string{"$SYS.ACCOUNT.BROOK.DISCONNECT", "$SYS.ACCOUNT.BROOK.CONNECT"}, false},
		auth.Attention: {"BROOK", []string{"brook.admin.stream.list", "brook.admin.cluster.info"}, inbox,
			[]string{"brook.hb.*", "brook.assign.*", "brook.attention.list", "_INBOX.attention.>"}, true},
	}
	for _, n := range nodes {
		design[auth.HostPrincipal(n)] = perm{"BROOK",
			[]string{"brook.hb." + n, "brook.assignments.pull", "brook.host." + n + ".leave", "brook.s.*.repl.*." + n, "brook.s.*.owner." + n,
				"brook.hostrepl.*." + n}, inbox,
			[]string{"brook.s.>", "brook.assign." + n, "brook.host." + n + ".seal", "brook.host." + n + ".seals", "brook.host." + n + ".handoff", "_INBOX.host." + n + ".>",
				"brook.hostrepl." + n + ".*", "brook.host." + n + ".probe"}, true}
	}
	opts, err := server.ProcessConfigFile(d2.NATSConf)
	if err != nil {
		t.Fatal(err)
	}
	if opts.SystemAccount != auth.AccountSys || opts.NoAuthUser != "" || len(opts.Users) != 0 || opts.Authorization != "" {
		t.Errorf("system account %q, no_auth_user %q, %d password users, token %q", opts.SystemAccount, opts.NoAuthUser, len(opts.Users), opts.Authorization)
	}
	if len(opts.Nkeys) != len(design) {
		t.Errorf("%d nkey users, want %d", len(opts.Nkeys), len(design))
	}
	for _, u := range opts.Nkeys {
		var name string
		for _, p := range d2.Principals {
			if p.PublicKey == u.Nkey {
				name = p.Name
			}
		}
		want, ok := design[name]
		if !ok {
			t.Errorf("nkey user %s is no principal of the design", u.Nkey)
			continue
		}
		delete(design, name)
		if u.Account == nil || u.Account.Name != want.account {
			t.Errorf("%s: account %v, want %s", name, u.Account, want.account)
		}
		if _, ok := u.AllowedConnectionTypes["STANDARD"]; !ok || len(u.AllowedConnectionTypes) != 1 {
			t.Errorf("%s: connection types %v, want STANDARD only", name, u.AllowedConnectionTypes)
		}
		pp := u.Permissions
		if pp == nil || pp.Publish == nil || pp.Subscribe == nil {
			t.Errorf("%s: permissions %+v", name, pp)
			continue
		}
		same := func(what string, got, want []string) {
			g, w := append([]string{}, got...), append([]string{}, want...)
			sort.Strings(g)
			sort.Strings(w)
			if len(g) != 0 || len(w) != 0 {
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s %s: %q, want %q", name, what, got, want)
				}
			}
		}
		same("publish allow", pp.Publish.Allow, want.pub)
		same("publish deny", pp.Publish.Deny, want.deny)
		same("subscribe allow", pp.Subscribe.Allow, want.sub)
		same("subscribe deny", pp.Subscribe.Deny, nil)
		if got := pp.Response != nil; got != want.responses {
			t.Errorf("%s: allow_responses %v, want %v", name, got, want.responses)
		} else if got && (pp.Response.MaxMsgs != 1 || pp.Response.Expires != 2*time.Minute) {
			t.Errorf("%s: responses %+v, want 1 message within 2m", name, pp.Response)
		}
	}
	if len(design) != 0 {
		t.Errorf("principals without an nkey user: %v", design)
	}
}

// TestTLS: with Spec.TLS the server demands a certificate of the
// deployment's CA, and the principals work over TLS.
func TestTLS(t *testing.T) {
	c := start(t, auth.Spec{Nodes: []string{"h1"}, TLS: true})
	client, h1 := c.as(auth.Client), c.as(auth.HostPrincipal("h1"))
	tb := &table{t: t, p: authcheck.Prober{Timeout: time.Second}}
	tb.req(client, "brook.s.x.pub", allowed, h1)
	tb.pub(client, "brook.hb.h1", refused, c.witness(auth.AccountBrook))
	tb.report()

	p := mustPrincipal(t, c.d, auth.Client)
	nk, err := nats.NkeyOptionFromSeed(p.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"no client certificate": {nk, nats.RootCAs(c.d.CAFile)},
		"plain text":            {nk},
	} {
		url := c.url
		if name == "plain text" {
			url = strings.Replace(url, "tls://", "nats://", 1)
		}
		if nc, err := nats.Connect(url, append(opts, nats.NoReconnect(), nats.Timeout(2*time.Second))...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	for _, f := range []string{c.d.CAFile, c.d.ServerCert, c.d.ServerKey, p.CertFile, p.KeyFile} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.d.Dir, "ca-key.pem")); err == nil {
		t.Error("the CA key was kept")
	}
}

func mustPrincipal(t *testing.T, d *auth.Deployment, name string) auth.Principal {
	t.Helper()
	p, ok := d.Principal(name)
	if !ok {
		t.Fatalf("no principal %s", name)
	}
	return p
}
