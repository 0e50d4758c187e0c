package workload

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWaitCountCountsEachOutcomeOnce: a wait counts the matching outcomes
// recorded before it began and those recorded while it waits, each once.
func TestWaitCountCountsEachOutcomeOnce(t *testing.T) {
	l := NewLedger()
	rec := func(seq uint64, confirmed bool) {
		t.Helper()
		if err := l.Record(Outcome{ID: ID{Producer: "p", Seq: seq}, Confirmed: confirmed}); err != nil {
			t.Fatal(err)
		}
	}
	rec(1, true)
	rec(2, false)
	confirmed := func(o Outcome) bool { return o.Confirmed }
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- l.WaitCount(ctx, 3, confirmed)
	}()
	rec(3, true)
	rec(4, false)
	select {
	case err := <-done:
		t.Fatalf("returned with 2 of 3 confirms: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	rec(5, true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A short wait that cannot be met says how many it had.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := l.WaitCount(ctx, 4, confirmed)
	if err == nil || !strings.Contains(err.Error(), "(have 3)") {
		t.Fatalf("unmet wait: %v", err)
	}
}
