package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/brook-streams/brook/tools/cluster"
)

// built holds the binaries TestMain built, or why they did not build.
var built struct {
	bins cluster.Bins
	err  error
}

// TestMain builds the three service binaries once for every test of the
// package, so each suite only starts processes.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// The suites skip themselves; nothing to build.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "brook-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	began := time.Now()
	root, err := cluster.RepoRoot(ctx)
	if err == nil {
		built.bins, err = cluster.Build(ctx, root, filepath.Join(dir, "bin"))
	}
	cancel()
	built.err = err
	if err == nil {
		fmt.Fprintf(os.Stderr, "e2e: built the service binaries in %v\n", time.Since(began).Round(time.Millisecond))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
