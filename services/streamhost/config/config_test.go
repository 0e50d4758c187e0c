package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/svcconfig"
)

// TestPrecedence checks defaults < file < environment < flags, one key per
// layer so that each layer's win is visible.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "host.yaml")
	yaml := "node: from-file\ndata-dir: /file\nmax-payload: 2048\nconfirm-timeout: 7s\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BROOK_DATA_DIR", "/env")
	t.Setenv("BROOK_CONFIRM_TIMEOUT", "9s")
	c, err := Load([]string{"--config", path, "--confirm-timeout", "3s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "from-file" { // file over default
		t.Errorf("node = %q, want from-file", c.Node)
	}
	if c.MaxPayload != 2048 {
		t.Errorf("max-payload = %d, want 2048", c.MaxPayload)
	}
	if c.DataDir != "/env" { // env over file
		t.Errorf("data-dir = %q, want /env", c.DataDir)
	}
	if c.ConfirmTimeout != 3*time.Second { // flag over env and file
		t.Errorf("confirm-timeout = %v, want 3s", c.ConfirmTimeout)
	}
	if c.HeartbeatInterval != 500*time.Millisecond { // default
		t.Errorf("heartbeat-interval = %v, want 500ms", c.HeartbeatInterval)
	}
	if c.DedupeRebuildRecords != 64<<10 || c.DedupeRebuildBytes != 64<<20 { // defaults
		t.Errorf("dedupe rebuild bounds %d records, %d bytes; want 65536, 67108864", c.DedupeRebuildRecords, c.DedupeRebuildBytes)
	}
	if c.MaxFetchWaits != 1024 || c.MaxInflight != 4096 { // defaults
		t.Errorf("caps %d fetch waits, %d in flight; want 1024, 4096", c.MaxFetchWaits, c.MaxInflight)
	}
}

func TestValidate(t *testing.T) {
	if _, err := Load([]string{"--data-dir", "/x"}); err == nil {
		t.Error("a missing node was accepted")
	}
	if _, err := Load([]string{"--node", "h.1", "--data-dir", "/x"}); err == nil {
		t.Error("a node name with a dot was accepted")
	}
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x", "--log-level", "loud"}); err == nil {
		t.Error("a bad log level was accepted")
	}
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x", "--dedupe-rebuild-records", "0"}); err == nil {
		t.Error("a dedupe rebuild bound of 0 was accepted")
	}
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x", "--max-inflight", "0"}); err == nil {
		t.Error("a cap of 0 requests in flight was accepted")
	}
	if c, err := Load([]string{"--node", "h1", "--data-dir", "/x", "--max-fetch-waits", "2", "--max-inflight", "8"}); err != nil || c.MaxFetchWaits != 2 || c.MaxInflight != 8 {
		t.Errorf("caps from flags: %d, %d, %v; want 2, 8", c.MaxFetchWaits, c.MaxInflight, err)
	}
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x"}); err != nil {
		t.Errorf("a minimal configuration was refused: %v", err)
	}
	// The direct link's address must be one other hosts can dial.
	for _, bad := range [][]string{
		{"--repl-listen", "0.0.0.0:7422"},
		{"--repl-listen", ":7422"},
		{"--repl-listen", "7422"},
		{"--repl-advertise", "h1:7422"},
		{"--repl-listen", "0.0.0.0:7422", "--repl-advertise", "h1"},
		{"--repl-listen", "0.0.0.0:0", "--repl-advertise", "h1:0"},
	} {
		if _, err := Load(append([]string{"--node", "h1", "--data-dir", "/x"}, bad...)); err == nil {
			t.Errorf("direct link %q was accepted", bad)
		}
	}
	for _, good := range [][]string{
		{"--repl-listen", "127.0.0.1:0"},
		{"--repl-listen", "0.0.0.0:7422", "--repl-advertise", "h1:7422"},
	} {
		if c, err := Load(append([]string{"--node", "h1", "--data-dir", "/x"}, good...)); err != nil || c.ReplListen != good[1] {
			t.Errorf("direct link %q: %v (listen %q)", good, err, c.ReplListen)
		}
	}
}

// TestNATSAuth: the nkey and TLS files come from the file, the environment
// and flags like every key; a certificate without its key is refused.
func TestNATSAuth(t *testing.T) {
	if c, err := Load([]string{"--node", "h1", "--data-dir", "/x"}); err != nil || c.NATSAuth != (svcconfig.NATSAuth{}) {
		t.Errorf("defaults: %+v %v; want no credentials", c.NATSAuth, err)
	}
	path := filepath.Join(t.TempDir(), "host.yaml")
	if err := os.WriteFile(path, []byte("node: h1\ndata-dir: /d\nnats-ca: /file/ca.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BROOK_NATS_NKEY", "/env/host-h1.nk")
	c, err := Load([]string{"--config", path, "--nats-cert", "/flag/c.pem", "--nats-key", "/flag/k.pem",
		"--nats-url", "nats://a:4222,nats://b:4222"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Nkey != "/env/host-h1.nk" || c.CA != "/file/ca.pem" || c.Cert != "/flag/c.pem" || c.Key != "/flag/k.pem" {
		t.Errorf("nats auth %+v", c.NATSAuth)
	}
	if c.NATSURL != "nats://a:4222,nats://b:4222" {
		t.Errorf("nats-url %q", c.NATSURL)
	}
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x", "--nats-cert", "c.pem"}); err == nil {
		t.Error("--nats-cert without --nats-key was accepted")
	}
}
