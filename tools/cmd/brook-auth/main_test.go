package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brook-streams/brook/tools/auth"
)

func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	var out bytes.Buffer
	if err := run([]string{"--dir", dir}, &out); err == nil || !strings.Contains(err.Error(), "--nodes") {
		t.Errorf("no --nodes: %v", err)
	}
	if err := run([]string{"--dir", dir, "--nodes", "h1, h2"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "host-h2.nk") || !strings.Contains(out.String(), "host-keys.json") {
		t.Errorf("output does not list the files:\n%s", out.String())
	}
	d, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"--dir", dir, "--nodes", "h1,h2"}, &out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second run: %v, want a refusal naming --force", err)
	}
	if err := run([]string{"--dir", dir, "--nodes", "h1,h2,h3", "--force"}, &out); err != nil {
		t.Fatal(err)
	}
	d2, err := auth.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d2.Nodes) != 3 || d2.HostKeyMap()["h1"] == d.HostKeyMap()["h1"] {
		t.Errorf("--force: nodes %v; h1's key %s was %s", d2.Nodes, d2.HostKeyMap()["h1"], d.HostKeyMap()["h1"])
	}
}
