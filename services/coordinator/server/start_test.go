package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestFailedStartLeavesNoGoroutine: a Start that fails (here: the Raft
// store cannot open, its data directory is a file) must not leave the
// heartbeat decoding loop it started running (found by the "Locks and
// goroutines" read: the early error returns did not cancel it).
func TestFailedStartLeavesNoGoroutine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{
		NATSURL: "nats://127.0.0.1:1", ReplicaID: 1, RaftAddr: "127.0.0.1:1",
		Peers: map[uint64]string{1: "127.0.0.1:1"}, DataDir: filepath.Join(file, "raft"),
		Logger: testLogger(t),
	})
	if err == nil {
		t.Fatal("Start succeeded on a data directory below a file")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var b strings.Builder
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "(*Server).reportLoop") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat decoding loop still runs after a failed Start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
