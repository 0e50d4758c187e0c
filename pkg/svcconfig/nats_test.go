package svcconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestNATSAuthValidate(t *testing.T) {
	if err := (NATSAuth{Cert: "c.pem"}).Validate(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if err := (NATSAuth{Key: "k.pem"}).Validate(); err == nil {
		t.Error("a key without its certificate was accepted")
	}
	if err := (NATSAuth{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}).Validate(); err != nil {
		t.Error(err)
	}
	if _, err := (NATSAuth{Nkey: filepath.Join(t.TempDir(), "none.nk")}).Options(""); err == nil {
		t.Error("a missing seed file was accepted")
	}
}

// TestNATSAuthNkey connects with a seed file to a server that knows only
// that nkey and allows it its own inboxes only: a request succeeds, so the
// inbox prefix is used; a bad seed file's error does not quote it.
func TestNATSAuthNkey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "svc.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"svc.echo"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"svc.echo", "_INBOX.svc.>"}},
			Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)

	if _, err := nats.Connect(s.ClientURL(), nats.Timeout(2*time.Second)); err == nil {
		t.Fatal("connected without the nkey")
	}
	opts, err := NATSAuth{Nkey: seedFile}.Options("_INBOX.svc")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect with the nkey: %v", err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("svc.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if m, err := nc.Request("svc.echo", []byte("hi"), 2*time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("request through the custom inbox: %v %v", m, err)
	}

	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("SECRETSTUFF-not-a-seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = NATSAuth{Nkey: bad}.Options("")
	if err == nil || strings.Contains(err.Error(), "SECRETSTUFF") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad seed file: %v; want an error naming the file, not its contents", err)
	}
}

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                                 "nats://127.0.0.1:4222",
		"nats://brook:brook@127.0.0.1:4222":                     "nats://***@127.0.0.1:4222",
		"nats://a:4222, nats://x:secret@h2:4222,tls://u:p@h3:1": "nats://a:4222,nats://***@h2:4222,tls://***@h3:1",
		"u:p@h:4222": "***@h:4222",
	} {
		if got := RedactURLs(in); got != want {
			t.Errorf("RedactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}
