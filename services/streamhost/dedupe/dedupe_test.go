package dedupe

import "testing"

func TestLookupRecord(t *testing.T) {
	w := New(3, 2)
	if _, ok := w.Lookup("p", 1); ok {
		t.Fatal("empty window reported a hit")
	}
	w.Record("p", 1, 10)
	w.Record("p", 1, 99) // a repeat keeps the first write's offset
	if off, ok := w.Lookup("p", 1); !ok || off != 10 {
		t.Fatalf("Lookup(p,1) = %d,%v; want 10,true", off, ok)
	}
}

func TestPerProducerBound(t *testing.T) {
	w := New(3, 10)
	for seq := uint64(1); seq <= 5; seq++ {
		w.Record("p", seq, seq*10)
	}
	// The two oldest sequences fell out; the last three remain.
	for seq := uint64(1); seq <= 5; seq++ {
		off, ok := w.Lookup("p", seq)
		want := seq >= 3
		if ok != want || (ok && off != seq*10) {
			t.Errorf("Lookup(p,%d) = %d,%v; want held=%v", seq, off, ok, want)
		}
	}
}

func TestProducerLRU(t *testing.T) {
	w := New(4, 2)
	w.Record("a", 1, 1)
	w.Record("b", 1, 2)
	w.Lookup("a", 1)    // a is now the most recently used
	w.Record("c", 1, 3) // evicts b, the least recently used
	if _, ok := w.Lookup("b", 1); ok {
		t.Error("b should have been evicted")
	}
	if _, ok := w.Lookup("a", 1); !ok {
		t.Error("a should have been kept")
	}
	if _, ok := w.Lookup("c", 1); !ok {
		t.Error("c should be held")
	}
	if w.Producers() != 2 {
		t.Errorf("Producers() = %d, want 2", w.Producers())
	}
}
