package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
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
	if _, err := Load([]string{"--node", "h1", "--data-dir", "/x"}); err != nil {
		t.Errorf("a minimal configuration was refused: %v", err)
	}
}
