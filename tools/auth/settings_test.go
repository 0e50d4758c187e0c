package auth_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/brook-streams/brook/tools/auth"
)

// TestServerSettings: brook-auth's nats.conf and the compose stack's
// deploy/nats.conf turn the sublist cache off (auth.ServerSettings), as
// nats-server reads them.
func TestServerSettings(t *testing.T) {
	d, err := auth.Generate(filepath.Join(t.TempDir(), "secrets"), auth.Spec{Nodes: []string{"h1"}})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(d.NATSConf)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoSublistCache {
		t.Errorf("%s: the sublist cache is on", d.NATSConf)
	}

	// deploy/nats.conf includes secrets/auth.conf, which make
	// compose-secrets writes: read it beside an empty one.
	data, err := os.ReadFile("../../deploy/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.Mkdir(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "auth.conf"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, data, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err = server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoSublistCache {
		t.Error("deploy/nats.conf: the sublist cache is on")
	}
}
