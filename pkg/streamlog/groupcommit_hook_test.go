package streamlog

import (
	"sync"
	"testing"
	"time"
)

// TestOnGroupCommit checks that the hook sees every write of a group and
// the time its synced commit took.
func TestOnGroupCommit(t *testing.T) {
	var mu sync.Mutex
	var groups, writes int
	var took time.Duration
	s, err := Open(Options{Dir: t.TempDir(), Logger: quietLogger(), CursorSyncInterval: time.Hour,
		OnGroupCommit: func(n int, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			groups++
			writes += n
			took += d
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	c := mustCreate(t, s, "s", 1)
	for i := range 3 {
		mustAppend(t, c, payloads("a", i, 2))
	}
	mu.Lock()
	defer mu.Unlock()
	if groups == 0 || writes != 3 || took <= 0 {
		t.Fatalf("groups %d writes %d took %v; want 3 writes in at least one group, time > 0", groups, writes, took)
	}
}

// TestOnChange checks that the hook names the copy at every change a
// heartbeat reports: records durable, cursor events durable, a seal, an
// epoch begun, a delete; and nothing on a read.
func TestOnChange(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	s, err := Open(Options{Dir: t.TempDir(), Logger: quietLogger(), CursorSyncInterval: time.Hour,
		OnChange: func(stream string) {
			mu.Lock()
			defer mu.Unlock()
			calls[stream]++
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	c := mustCreate(t, s, "s", 1)
	other := mustCreate(t, s, "o", 2)
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := calls["s"]
		calls["s"] = 0
		return n
	}
	step := func(what string, f func() error) {
		t.Helper()
		seen()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if seen() == 0 {
			t.Fatalf("%s: OnChange not called", what)
		}
	}
	step("append", func() error { mustAppend(t, c, payloads("a", 0, 2)); return nil })
	step("cursor event and sync", func() error {
		if _, err := c.AppendCursor("k", 1); err != nil {
			return err
		}
		return c.SyncCursors()
	})
	step("seal", func() error { _, err := c.Seal(2, 1); return err })
	step("begin epoch", func() error { return c.BeginEpoch(2) })
	seen()
	if _, err := c.Read(0, 10, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, other, payloads("b", 0, 1))
	if n := seen(); n != 0 {
		t.Fatalf("a read and another copy's append called OnChange for s %d times", n)
	}
	step("delete", func() error { return s.Delete("s") })
}
