package host

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// A Run whose subscription fails returns only once the work handed to the
// host before the failure has ended, as its graceful return does: here a
// task on the host's pool (a notice's or a seal's, in a real run). Before,
// the early return closed the store under it and left the pool's workers
// running.
func TestRunFailingToSubscribeWaitsForItsWork(t *testing.T) {
	nc := connectNATS(t)
	h, err := New(Config{Node: "n1", DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nc)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var ended atomic.Bool
	h.pool.Go(func() {
		<-release
		ended.Store(true)
	})
	nc.Close() // the first subscription fails
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Run(ctx); err == nil {
		t.Fatal("Run on a closed connection returned no error")
	}
	if !ended.Load() {
		t.Fatal("Run returned while a task on its pool still ran")
	}
}
