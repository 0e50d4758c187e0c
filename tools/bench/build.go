package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/brook-streams/brook/tools/cluster"
)

// RepoRoot is the folder of the go.work that the go command sees from the
// working directory.
func RepoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	w := strings.TrimSpace(string(out))
	if w == "" || w == "off" {
		return "", fmt.Errorf("not inside the brook workspace (go env GOWORK is %q)", w)
	}
	return filepath.Dir(w), nil
}

// BuildNATSServer builds nats-server (the version the workspace pins) into
// dir and returns its path.
func BuildNATSServer(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	return cluster.BuildNATSServer(ctx, root, dir)
}
