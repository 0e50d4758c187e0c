package brookload

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stand-in docker records its arguments and answers ps with one
// container id, so the commands ComposeNodes runs can be checked.
func TestComposeNodesCommands(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\n[ \"$1\" = ps ] && echo c0ffee\nexit 0\n"
	docker := filepath.Join(dir, "docker")
	if err := os.WriteFile(docker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := &ComposeNodes{Docker: docker}
	ctx := context.Background()
	if _, err := d.Restart(ctx, "h2"); err == nil {
		t.Error("restart of a node this run did not kill: want an error")
	}
	what, err := d.Kill(ctx, "h2")
	if err != nil || what != "container c0ffee" {
		t.Fatalf("kill: %q, %v", what, err)
	}
	if _, err := d.Restart(ctx, "h2"); err != nil {
		t.Fatalf("restart: %v", err)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := "ps -q --filter label=com.docker.compose.service=host2\nkill --signal KILL c0ffee\nstart c0ffee\n"
	if string(b) != want {
		t.Errorf("docker was run as\n%s\nwant\n%s", b, want)
	}

	// No container, or more than one, is an error, not a guess.
	none := filepath.Join(dir, "docker-none")
	if err := os.WriteFile(none, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (&ComposeNodes{Docker: none}).Kill(ctx, "h1"); err == nil || !strings.Contains(err.Error(), "found 0") {
		t.Errorf("kill with no container: %v", err)
	}
}
