package client

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// seedFile writes a new user nkey's seed to a file and returns the file
// and the public key.
func seedFile(t *testing.T) (string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	path := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pub
}

// TestRestrictedClient runs a client under the permissions brook's client
// principal has (issue 13): it may publish only to the data plane and the
// read-only admin verbs, and subscribe only to _INBOX.client.>. With
// WithNkeySeedFile and WithInboxPrefix(wire.InboxClient) every request
// path works: publish, an async publisher's confirms, fetch, commit and
// admin; without the prefix its replies are denied.
func TestRestrictedClient(t *testing.T) {
	clientSeed, clientKey := seedFile(t)
	svcSeed, svcKey := seedFile(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{
			{Nkey: clientKey, Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"brook.s.*.pub", "brook.s.*.pubb", "brook.s.*.fetch", "brook.s.*.commit",
					"brook.admin.stream.info", "brook.admin.stream.list", "brook.admin.cluster.info", "brook.attention.list"}},
				Subscribe: &server.SubjectPermission{Allow: []string{wire.InboxClient + ".>"}},
			}},
			{Nkey: svcKey, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Deny: []string{"_INBOX.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"brook.>"}},
				Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
			}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)

	svcAuth, err := nats.NkeyOptionFromSeed(svcSeed)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := nats.Connect(s.ClientURL(), svcAuth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	subscribe(t, svc, wire.PublishSubject("s"), func(m *nats.Msg) {
		respondJSON(t, m, wire.PublishConfirm{StreamID: 1, Offset: 3, Epoch: 1, Copies: 2, W: 2})
	})
	subscribe(t, svc, wire.FetchSubject("s"), func(m *nats.Msg) {
		respondBatch(t, m, &frame.Batch{Epoch: 1, Tail: 4, Confirmed: 4, Next: 4})
	})
	subscribe(t, svc, wire.CommitSubject("s"), func(m *nats.Msg) {
		respondJSON(t, m, wire.CursorCommitReply{Cursor: "c1", Offset: 2})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusServing})
	})

	c := connectClient(t, s.ClientURL(), WithNkeySeedFile(clientSeed), WithInboxPrefix(wire.InboxClient))
	ctx := ctxTimeout(t, 10*time.Second)
	if pc, err := c.Publish(ctx, "s", []byte("x")); err != nil || pc.Offset != 3 {
		t.Fatalf("publish: %+v %v", pc, err)
	}
	p, err := c.NewAsyncPublisher("s", AsyncConfig{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.PublishAsync(ctx, []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if pc, err := f.Wait(ctx); err != nil || pc.Offset != 3 {
		t.Fatalf("async publish: %+v %v", pc, err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Fetch(ctx, "s", wire.FetchRequest{}); err != nil || b.Tail != 4 {
		t.Fatalf("fetch: %+v %v", b, err)
	}
	if r, err := c.CommitCursor(ctx, "s", "c1", 2); err != nil || r.Cursor != "c1" {
		t.Fatalf("commit: %+v %v", r, err)
	}
	if info, err := c.StreamInfo(ctx, "s"); err != nil || info.Stream != "s" {
		t.Fatalf("stream info: %+v %v", info, err)
	}

	// The same credential with nats.go's own _INBOX: nothing comes back.
	plain := connectClient(t, s.ClientURL(), WithNkeySeedFile(clientSeed), WithRetry(1, 0), WithRequestTimeout(300*time.Millisecond),
		WithNATSOptions(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	if _, err := plain.Publish(ctxTimeout(t, 5*time.Second), "s", []byte("z")); err == nil {
		t.Fatal("a publish whose reply inbox the client may not subscribe to was answered")
	}
}

func TestConnectOptionErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Connect(ctx, "nats://127.0.0.1:1", WithNkeySeedFile(filepath.Join(t.TempDir(), "none.nk"))); err == nil {
		t.Error("a missing seed file was accepted")
	}
	if _, err := Connect(ctx, "nats://127.0.0.1:1", WithTLS("", "c.pem", "")); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := Connect(ctx, "nats://127.0.0.1:1", WithInboxPrefix("_INBOX.>")); err == nil {
		t.Error("a wildcard inbox prefix was accepted")
	}
}
