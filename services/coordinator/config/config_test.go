package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/raftstore"
	"github.com/brook-streams/brook/services/coordinator/recovery"
	"github.com/brook-streams/brook/services/coordinator/server"
	"github.com/brook-streams/brook/services/coordinator/state"
)

// TestPrecedence: defaults < file < environment < flags, one key won by each
// layer.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	yaml := "data-dir: /from/file\nttl: 3s\nreplace-after: 1m\nseal-timeout: 4s\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BROOK_TTL", "5s")
	t.Setenv("BROOK_REPLACE_AFTER", "2m")
	t.Setenv("BROOK_DEFAULT_POLICY", "replica_durable(2)")
	c, err := Load([]string{"--config", path, "--replace-after", "7m", "--replica-id", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if c.DisconnectGrace != wire.DefaultDisconnectGrace || c.RTTMillisecond != raftstore.DefaultRTTMillisecond || // defaults
		c.MaxStreams != state.DefaultMaxStreams || c.MaxCopiesPerHost != state.DefaultMaxCopiesPerHost ||
		c.MaxInflight != server.DefaultMaxInflight {
		t.Fatalf("defaults: %+v", c)
	}
	if c.DataDir != "/from/file" || c.SealTimeout != 4*time.Second { // file
		t.Fatalf("file: %+v", c)
	}
	if c.TTL != 5*time.Second || c.DefaultPolicy != "replica_durable(2)" { // env over file
		t.Fatalf("env: %+v", c)
	}
	if c.ReplaceAfter != 7*time.Minute { // flag over env
		t.Fatalf("flag: %+v", c)
	}
	if c.ReplicaID != 2 || c.RaftAddr != "127.0.0.1:7102" { // raft-addr from --peers
		t.Fatalf("replica: %d %s", c.ReplicaID, c.RaftAddr)
	}
}

func TestValidation(t *testing.T) {
	for _, args := range [][]string{
		{},                                       // no data dir
		{"--data-dir", "d", "--replica-id", "9"}, // not a peer
		{"--data-dir", "d", "--peers", "1=a:1,1=b:2"},
		{"--data-dir", "d", "--default-policy", "most"},
		{"--data-dir", "d", "--ttl", "0s"},
		{"--data-dir", "d", "--log-format", "xml"},
		{"--data-dir", "d", "--raft-addr", "127.0.0.1:9999"},
		{"--data-dir", "d", "--max-streams", "0"},
		{"--data-dir", "d", "--max-copies-per-host", "-1"},
	} {
		if _, err := Load(args); err == nil {
			t.Errorf("Load(%q) accepted", args)
		}
	}
	peers, err := ParsePeers(" 3=c:3, 1=a:1,2=b:2 ")
	if err != nil || len(peers) != 3 || peers[3] != "c:3" {
		t.Fatalf("peers %v %v", peers, err)
	}
	if ids := PeerIDs(peers); ids[0] != 1 || ids[2] != 3 {
		t.Fatalf("ids %v", ids)
	}
}

// TestNATSAuthAndHostKeys: the credential settings load like every key,
// a system nkey needs a system URL, and the host-keys file is checked.
func TestNATSAuthAndHostKeys(t *testing.T) {
	t.Setenv("BROOK_NATS_NKEY", "/env/coordinator.nk")
	t.Setenv("BROOK_HOST_KEYS", "/env/host-keys.json")
	c, err := Load([]string{"--data-dir", "d", "--nats-system-url", "nats://a:4222,nats://b:4222",
		"--nats-system-nkey", "/flag/coordinator-sys.nk", "--nats-ca", "/flag/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Nkey != "/env/coordinator.nk" || c.NATSSystemNkey != "/flag/coordinator-sys.nk" || c.CA != "/flag/ca.pem" ||
		c.HostKeys != "/env/host-keys.json" || c.NATSSystemURL != "nats://a:4222,nats://b:4222" {
		t.Fatalf("config %+v", c)
	}
	for _, args := range [][]string{
		{"--data-dir", "d", "--nats-system-nkey", "sys.nk"}, // no system URL
		{"--data-dir", "d", "--nats-key", "k.pem"},          // key without certificate
	} {
		if _, err := Load(args); err == nil {
			t.Errorf("Load(%q) accepted", args)
		}
	}

	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := user.PublicKey()
	seed, _ := user.Seed()
	accountKey, _ := account.PublicKey()
	keys, err := ReadHostKeys(write("ok.json", `{"h1":"`+key+`"}`))
	if err != nil || keys["h1"] != key || len(keys) != 1 {
		t.Fatalf("host keys %v %v", keys, err)
	}
	for name, body := range map[string]string{
		"array.json":     `["h1"]`,
		"badnode.json":   `{"h.1":"` + key + `"}`,
		"seed.json":      `{"h1":"` + string(seed) + `"}`,
		"notakey.json":   `{"h1":"hello"}`,
		"account.json":   `{"h1":"` + accountKey + `"}`,
		"truncated.json": `{"h1":`,
	} {
		if _, err := ReadHostKeys(write(name, body)); err == nil {
			t.Errorf("%s (%s) accepted", name, body)
		}
	}
	if _, err := ReadHostKeys(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file accepted")
	}
}

// TestRaftTLS: --raft-ca, --raft-cert and --raft-key come all three (from
// flags or BROOK_RAFT_*) or not at all.
func TestRaftTLS(t *testing.T) {
	c, err := Load([]string{"--data-dir", "d"})
	if err != nil || c.RaftTLS() {
		t.Fatalf("default: %v, raft TLS %v", err, c.RaftTLS())
	}
	t.Setenv("BROOK_RAFT_CA", "/env/ca.pem")
	c, err = Load([]string{"--data-dir", "d", "--raft-cert", "c.pem", "--raft-key", "k.pem"})
	if err != nil || !c.RaftTLS() || c.RaftCA != "/env/ca.pem" || c.RaftCert != "c.pem" || c.RaftKey != "k.pem" {
		t.Fatalf("all three: %v %+v", err, c)
	}
	for _, args := range [][]string{
		{"--raft-cert", "c.pem"},
		{"--raft-key", "k.pem"},
	} {
		if _, err := Load(append([]string{"--data-dir", "d"}, args...)); err == nil {
			t.Errorf("Load(%q) with BROOK_RAFT_CA set accepted", args)
		}
	}
	t.Setenv("BROOK_RAFT_CA", "")
	if _, err := Load([]string{"--data-dir", "d", "--raft-cert", "c.pem", "--raft-key", "k.pem"}); err == nil {
		t.Error("--raft-cert and --raft-key without a CA accepted")
	}
}

// The flags' defaults are the packages' own, one definition each: a
// coordinator started without them gets what server.Options.defaults
// fills in and what the recovery worker and the controller fall back to.
func TestDefaultsAreThePackagesOwn(t *testing.T) {
	c, err := Load([]string{"--data-dir", t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c.SealTimeout != recovery.DefaultSealTimeout || c.ReplaceAfter != controller.DefaultReplaceAfter ||
		c.TTL != wire.DefaultHostTTL || c.ProbeTimeout != wire.DefaultProbeTimeout {
		t.Fatalf("seal timeout %v (package %v), replace after %v (package %v), ttl %v (package %v), probe timeout %v (package %v)",
			c.SealTimeout, recovery.DefaultSealTimeout, c.ReplaceAfter, controller.DefaultReplaceAfter,
			c.TTL, wire.DefaultHostTTL, c.ProbeTimeout, wire.DefaultProbeTimeout)
	}
}
