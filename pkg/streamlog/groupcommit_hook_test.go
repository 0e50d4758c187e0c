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
