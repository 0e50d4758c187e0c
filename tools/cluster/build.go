package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Bins are the paths of the built binaries. A binary that failed to build
// has an empty path.
type Bins struct {
	Coordinator string
	StreamHost  string
	Attention   string
}

// binary names the services' commands and their package paths.
var binaries = []struct {
	name, pkg string
	set       func(*Bins, string)
}{
	{"brook-coordinator", "./services/coordinator/cmd/brook-coordinator", func(b *Bins, p string) { b.Coordinator = p }},
	{"brook-streamhost", "./services/streamhost/cmd/brook-streamhost", func(b *Bins, p string) { b.StreamHost = p }},
	{"brook-attention", "./services/attention/cmd/brook-attention", func(b *Bins, p string) { b.Attention = p }},
}

// goTool returns the go command: the one on PATH, or Go's usual place.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// goEnv is the environment of go commands: static binaries (the images are
// FROM scratch), and the module proxy unless the caller chose one.
func goEnv() []string {
	env := append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("GOPROXY") == "" {
		env = append(env, "GOPROXY=https://proxy.golang.org")
	}
	return env
}

// RepoRoot returns the directory of the go.work file that the go command
// uses from the current directory.
func RepoRoot(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, goTool(), "env", "GOWORK")
	cmd.Env = goEnv()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", errors.New("go env GOWORK: not inside a go.work workspace")
	}
	return filepath.Dir(work), nil
}

// Build builds the three service binaries from repoRoot into outDir, one
// go build each, so that one service that does not build yet leaves the
// others usable. The error names every binary that failed, with the end of
// the compiler's output; the returned Bins hold the ones that built.
func Build(ctx context.Context, repoRoot, outDir string) (Bins, error) {
	var bins Bins
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return bins, fmt.Errorf("build: %w", err)
	}
	var errs []error
	for _, b := range binaries {
		out := filepath.Join(outDir, b.name)
		cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, b.pkg)
		cmd.Dir = repoRoot
		cmd.Env = goEnv()
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Errorf("build %s: %w\n%s", b.name, err, tail(output.String(), 20)))
			continue
		}
		b.set(&bins, out)
	}
	return bins, errors.Join(errs...)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BuildNATSServer builds nats-server, the version the workspace pins (as
// `make build` does), from repoRoot into outDir and returns its path.
func BuildNATSServer(ctx context.Context, repoRoot, outDir string) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	bin := filepath.Join(outDir, "nats-server")
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.Dir = filepath.Join(repoRoot, "tools")
	cmd.Env = goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nats-server: %w\n%s", err, tail(string(out), 20))
	}
	return bin, nil
}
