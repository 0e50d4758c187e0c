package streamlog

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNextGroupAppliedDuringFsync: while a group's WAL fsync is held, the
// committer applies the next group behind it (it does not wait for the
// first to be answered), and the second group is answered only after the
// first, each copy's tail moving in order.
func TestNextGroupAppliedDuringFsync(t *testing.T) {
	var applies atomic.Int32
	s, hold := openSyncHeld(t, t.TempDir(), func(s *impl) { s.beforeCommit = func() { applies.Add(1) } })
	t.Cleanup(func() { _ = s.Close() })
	var released sync.Once
	release := func() { released.Do(func() { close(hold.release) }) }
	t.Cleanup(release) // runs before Close: a failed test does not hang on the held fsync
	c := mustCreate(t, s, "s", 1)
	ctx := context.Background()

	hold.on.Store(true)
	before := applies.Load()
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Append(ctx, payloads("first", 0, 2))
		firstDone <- err
	}()
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group's fsync was never reached")
	}
	secondDone := make(chan error, 1)
	go func() {
		_, err := c.Append(ctx, payloads("second", 0, 3))
		secondDone <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for applies.Load() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d groups applied while the first one's fsync was held, want 2", applies.Load()-before)
		}
		time.Sleep(time.Millisecond) // waiting for the committer, not an assertion
	}
	select {
	case err := <-secondDone:
		t.Fatalf("the second append was answered (%v) before the first group's fsync ended", err)
	case err := <-firstDone:
		t.Fatalf("the first append was answered (%v) before its fsync ended", err)
	default:
	}
	if tl := c.Tails(); tl.Record != 0 {
		t.Fatalf("durable tail %d while the first fsync is held, want 0", tl.Record)
	}
	release()
	for i, ch := range []chan error{firstDone, secondDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d not answered after the fsync was released", i)
		}
	}
	if tl := c.Tails(); tl.Record != 5 {
		t.Fatalf("durable tail %d, want 5", tl.Record)
	}
	got := dataOf(readAll(t, c))
	want := append(payloads("first", 0, 2), payloads("second", 0, 3)...)
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("record %d is %q, want %q", i, got[i], want[i])
		}
	}
}
