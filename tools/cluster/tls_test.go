package cluster

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// TestTLSCluster: with Config.TLS every process reaches nats-server over
// TLS with its principal's certificate (the hosts through their proxies),
// the coordinators run Raft over mutual TLS, a replicated stream takes a
// record, and a connection without a certificate, or in plain text, is
// refused even with a valid nkey.
func TestTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the process cluster in -short mode")
	}
	ctx := ctxTimeout(t, 3*time.Minute)
	c := startBuiltCluster(t, ctx, Config{Coordinators: 3, Hosts: 2, TLS: true})
	if !c.TLS() || c.Auth().RaftCert == "" {
		t.Fatalf("the deployment has no TLS: %+v", c.Auth())
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesLive(ctx, 2); err != nil {
		t.Fatal(err)
	}

	cl, err := client.Connect(ctx, c.NATSURL(), append(c.ClientOptions(auth.Admin), client.WithName("brook-tls-test"),
		client.WithRetry(0, 30*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	if _, err := cl.CreateStream(ctx, wire.StreamCreate{Stream: "tls", Copies: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitServing(ctx, "tls"); err != nil {
		t.Fatal(err)
	}
	pc, err := cl.Publish(ctx, "tls", []byte("over tls"))
	if err != nil || pc.Copies < 2 {
		t.Fatalf("publish: %+v %v", pc, err)
	}

	// Every connection the server holds is TLS: the harness's and this
	// test's, the coordinators' two each and the hosts' (proxied).
	plain, total, err := c.PlainConnections()
	if err != nil || len(plain) != 0 || total < 2+3*2+2 {
		t.Fatalf("connections: %d in all, plain %v (%v)", total, plain, err)
	}

	p, _ := c.Auth().Principal(auth.Client)
	nk, err := nats.NkeyOptionFromSeed(p.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"plain text":            {nk},
		"no client certificate": {nk, nats.RootCAs(c.Auth().CAFile)},
	} {
		if nc, err := nats.Connect(c.NATSURL(), append(opts, nats.NoReconnect(), nats.Timeout(3*time.Second))...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}

	for i := range c.Coordinators() {
		p := c.Coordinator(i)
		log, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "raft transport uses mutual TLS") {
			t.Errorf("%s does not log Raft over mutual TLS:\n%s", p.Name, p.LogTail(20))
		}
	}
}
