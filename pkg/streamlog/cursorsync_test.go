package streamlog

import (
	"context"
	"fmt"
	"testing"
)

// The periodic cursor sync looks only at the copies that wrote owner
// cursor events since its last tick, not at every copy the store holds
// (an idle host with thousands of copies visited each one every 50 ms).
// A copy written is taken once and made durable. (A failed sync is not
// retried: it fails the store for good, see TestFailStop.)
func TestCursorSyncVisitsOnlyCopiesWritten(t *testing.T) {
	s := openTest(t, t.TempDir(), nil) // sync interval of an hour: the test ticks
	var cs []*Copy
	for i := range 20 {
		c := mustCreate(t, s, fmt.Sprintf("c%02d", i), uint64(i+1))
		mustAppend(t, c, payloads("r", 0, 3))
		cs = append(cs, c)
	}
	if got := s.takeUnsynced(); len(got) != 0 {
		t.Fatalf("before any cursor event the sync would visit %d copies, want none", len(got))
	}
	for _, i := range []int{3, 11} {
		if _, err := cs[i].AppendCursor("reader", 2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs[3].AppendCursor("reader", 3); err != nil {
		t.Fatal(err)
	}
	got := s.takeUnsynced()
	if len(got) != 2 || !containsCopy(got, cs[3]) || !containsCopy(got, cs[11]) {
		t.Fatalf("the sync would visit %d copies, want exactly c03 and c11", len(got))
	}
	if err := s.syncCursorsOf(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if tl := cs[3].Tails(); tl.CursorDurable != 2 {
		t.Fatalf("c03 after the tick: %+v, want 2 cursor events durable", tl)
	}
	if tl := cs[11].Tails(); tl.CursorDurable != 1 {
		t.Fatalf("c11 after the tick: %+v, want 1 cursor event durable", tl)
	}
	if got := s.takeUnsynced(); len(got) != 0 {
		t.Fatalf("after the tick the next would visit %d copies, want none", len(got))
	}
}

func containsCopy(cs []*copyImpl, c *Copy) bool {
	for _, x := range cs {
		if x == &c.copyImpl {
			return true
		}
	}
	return false
}
