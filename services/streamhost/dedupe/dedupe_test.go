package dedupe

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

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

// RecordBytes copies a producer's name only when the window meets it
// first: a follower notes every record it applies.
func TestRecordBytesCopiesANewNameOnly(t *testing.T) {
	w := New(64, 4)
	name := []byte("producer-1")
	w.RecordBytes(name, 1, 10)
	name[0] = 'P' // the window kept its own copy
	if off, ok := w.Lookup("producer-1", 1); !ok || off != 10 {
		t.Fatalf("Lookup after RecordBytes: %d, %v", off, ok)
	}
	name[0] = 'p'
	seq := uint64(1)
	for ; seq < 200; seq++ { // a full ring, which grows no more
		w.RecordBytes(name, seq, seq*10)
	}
	if n := testing.AllocsPerRun(100, func() {
		seq++
		w.RecordBytes(name, seq, seq*10)
	}); n != 0 {
		t.Fatalf("RecordBytes of a known producer allocated %v times per call", n)
	}
	if off, ok := w.Lookup("producer-1", seq); !ok || off != seq*10 {
		t.Fatalf("Lookup(%d) %d, %v", seq, off, ok)
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

// model is the window's meaning, kept simple: per producer a map from
// sequence to first offset and the sequences in write order, and the
// producers in order of use (least recently used first).
type model struct {
	per, producers int
	seqs           map[string]map[uint64]uint64
	order          map[string][]uint64
	used           []string
}

func (m *model) use(name string) {
	if i := slices.Index(m.used, name); i >= 0 {
		m.used = slices.Delete(m.used, i, i+1)
	}
	m.used = append(m.used, name)
}

func (m *model) lookup(name string, seq uint64) (uint64, bool) {
	if m.seqs[name] != nil {
		m.use(name)
	}
	off, ok := m.seqs[name][seq]
	return off, ok
}

func (m *model) record(name string, seq, off uint64) {
	if m.seqs[name] == nil {
		if len(m.used) >= m.producers {
			delete(m.seqs, m.used[0])
			delete(m.order, m.used[0])
			m.used = m.used[1:]
		}
		m.seqs[name] = map[uint64]uint64{}
	}
	m.use(name)
	if _, held := m.seqs[name][seq]; held {
		return
	}
	m.seqs[name][seq] = off
	m.order[name] = append(m.order[name], seq)
	if len(m.order[name]) > m.per {
		delete(m.seqs[name], m.order[name][0])
		m.order[name] = m.order[name][1:]
	}
}

// TestWindowMatchesModel drives the window and the model with the same
// random records and lookups: sequences mostly increasing, with retries of
// recent ones and jumps back (a producer restarted, a batch retried after
// newer ones), so that rings go out of order and back in order.
func TestWindowMatchesModel(t *testing.T) {
	for _, c := range []struct{ per, producers int }{{1, 2}, {2, 2}, {3, 2}, {8, 2}, {64, 2}, {3, 40}, {8, 40}} {
		per := c.per
		rng := rand.New(rand.NewPCG(uint64(per), uint64(c.producers)))
		// More producers than the window keeps, so that it evicts too.
		w := New(per, c.producers)
		m := &model{per: per, producers: c.producers, seqs: map[string]map[uint64]uint64{}, order: map[string][]uint64{}}
		names := make([]string, c.producers+c.producers/2+1)
		for i := range names {
			names[i] = fmt.Sprint("p", i)
		}
		next := map[string]uint64{}
		ooo, overflowed := 0, 0
		for i := 0; i < 200000; i++ {
			name := names[rng.IntN(len(names))]
			var seq uint64
			switch r := rng.IntN(100); {
			case r < 80:
				next[name]++
				seq = next[name]
			case r < 95:
				seq = next[name] - uint64(rng.IntN(2*per+2))
			default:
				seq = next[name] + uint64(rng.IntN(8)) - 4
			}
			if rng.IntN(2) == 0 {
				got, gok := w.Lookup(name, seq)
				want, wok := m.lookup(name, seq)
				if got != want || gok != wok {
					t.Fatalf("per %d op %d: Lookup(%s,%d) = %d,%v; the model says %d,%v", per, i, name, seq, got, gok, want, wok)
				}
				continue
			}
			off := uint64(i)
			if rng.IntN(2) == 0 {
				w.Record(name, seq, off)
			} else {
				w.RecordBytes([]byte(name), seq, off)
			}
			m.record(name, seq, off)
			if p := w.byName[name]; p != nil && p.seqs != nil {
				ooo++
				if len(p.seqs.overflow) > 0 {
					overflowed++
				}
			}
		}
		if ooo == 0 && per > 1 { // a ring of one is always in order
			t.Fatalf("per %d: no ring ever went out of order; the test does not reach the index", per)
		}
		if overflowed == 0 && per > 2 {
			t.Fatalf("per %d: no index ever overflowed; the test does not reach its map", per)
		}
		// Every producer's ring is back in order after as many in-order
		// records as it holds.
		for _, name := range names[:3] {
			for j := 0; j <= per; j++ {
				next[name]++
				w.Record(name, next[name], next[name])
				m.record(name, next[name], next[name])
			}
			if p := w.byName[name]; p != nil && p.seqs != nil {
				t.Errorf("per %d: producer %s still keeps an index after %d in-order records", per, name, per+1)
			}
			for seq := next[name] - uint64(per) - 2; seq <= next[name]+1; seq++ {
				got, gok := w.Lookup(name, seq)
				want, wok := m.lookup(name, seq)
				if got != want || gok != wok {
					t.Fatalf("per %d: Lookup(%s,%d) = %d,%v; the model says %d,%v", per, name, seq, got, gok, want, wok)
				}
			}
		}
	}
}

// BenchmarkWindow is the owner's per-record work in a window-256 run: 256
// producers, each writing increasing sequences, interleaved; every record
// is looked up, then recorded.
func BenchmarkWindow(b *testing.B) {
	const producers = 256
	names := make([]string, producers)
	for i := range names {
		names[i] = fmt.Sprintf("bench-run-%d", i)
	}
	w := New(DefaultPerProducer, DefaultProducers)
	seq := make([]uint64, producers)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := i % producers
		seq[p]++
		if _, ok := w.Lookup(names[p], seq[p]); ok {
			b.Fatal("a new sequence was found")
		}
		w.Record(names[p], seq[p], uint64(i))
	}
}

// BenchmarkWindowConcurrentPublishes is the owner's per-record work for
// one producer whose 256 concurrent publishes reach it out of order, as
// the bench's window-256 publisher's do: sequences in runs of 256, each
// run shuffled; every record is looked up, then recorded.
func BenchmarkWindowConcurrentPublishes(b *testing.B) {
	const window = 256
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]uint64, 64*window)
	for i := range order {
		order[i] = uint64(i)
	}
	for i := 0; i < len(order); i += window {
		run := order[i : i+window]
		rng.Shuffle(len(run), func(x, y int) { run[x], run[y] = run[y], run[x] })
	}
	w := New(DefaultPerProducer, DefaultProducers)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint64(i/len(order)*len(order)) + order[i%len(order)] + 1
		if _, ok := w.Lookup("bench-run-0", seq); ok {
			b.Fatal("a new sequence was found")
		}
		w.Record("bench-run-0", seq, uint64(i))
	}
}

// A full window drops its least recently used producer for a new one,
// also when the producers it had found least recently used were used
// since.
func TestProducerEvictionIsLeastRecentlyUsed(t *testing.T) {
	w := New(4, 32)
	for i := 0; i < 32; i++ {
		w.Record(fmt.Sprint("p", i), 1, uint64(i))
	}
	w.Lookup("p0", 1) // p0 and p1 are now the most recently used
	w.Record("p1", 2, 99)
	gone := func(name string) {
		t.Helper()
		if _, ok := w.byName[name]; ok {
			t.Fatalf("%s was kept", name)
		}
		if n := w.Producers(); n != 32 {
			t.Fatalf("%d producers, want 32", n)
		}
	}
	w.Record("new1", 1, 100)
	gone("p2")
	w.Lookup("p3", 1) // the next least recently used is used again
	w.Record("new2", 1, 101)
	gone("p4")
	w.Record("new3", 1, 102)
	gone("p5")
	for _, name := range []string{"p0", "p1", "p3", "p6", "p31", "new1", "new2", "new3"} {
		if _, ok := w.byName[name]; !ok {
			t.Errorf("%s was evicted", name)
		}
	}
}

// BenchmarkWindowEvictionChurn is the eviction's worst case at the default
// bounds: a full window of 10,000 producers, 9,999 of them used in turn
// (so the least recently used list goes stale as fast as it can) and a new
// producer for every record of theirs, each new one evicting one. The
// least recently used list is made again (a read of every producer's use)
// once per quarter of the producers used or evicted, so its cost per
// record stays bounded: 7.4 µs per step with a sixteenth and a full sort,
// 2.2 µs with a quarter selected (this machine, 2026-12-06).
func BenchmarkWindowEvictionChurn(b *testing.B) {
	w := New(DefaultPerProducer, DefaultProducers)
	hot := make([]string, DefaultProducers-1)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%d", i)
		w.Record(hot[i], 1, uint64(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Record(hot[i%len(hot)], uint64(2+i/len(hot)), uint64(i))
		w.Record(fmt.Sprintf("new-%d", i), 1, uint64(i))
	}
	if w.Producers() > DefaultProducers {
		b.Fatalf("%d producers held", w.Producers())
	}
}

func TestSelectOldest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 16, 17, 100, 1000} {
		for _, k := range []int{1, 2, n / 16, n / 2, n} {
			if k < 1 || k > n {
				continue
			}
			cs := make([]candidate, n)
			for i, u := range rng.Perm(n) {
				cs[i] = candidate{used: uint64(u) * 3}
			}
			selectOldest(cs, k)
			for i := range k {
				if cs[i].used >= uint64(k)*3 {
					t.Fatalf("n %d k %d: entry %d has use %d, not among the %d oldest", n, k, i, cs[i].used, k)
				}
			}
		}
	}
}

// TestSeqIndexMatchesMap puts, removes and looks up sequences that share
// slots (a few multiples of the slot count apart) in a seqIndex and in a
// map, and compares every lookup.
func TestSeqIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	x := newSeqIndex(4)
	if len(x.slots) != 8 {
		t.Fatalf("a ring of 4 got %d slots, want 8", len(x.slots))
	}
	m := map[uint64]uint64{}
	candidates := []uint64{}
	for k := uint64(0); k < 4; k++ {
		for j := uint64(0); j < 4; j++ {
			candidates = append(candidates, k*uint64(len(x.slots))+j, ^uint64(0)-k*uint64(len(x.slots))-j)
		}
	}
	overflowed := false
	for i := 0; i < 20000; i++ {
		seq := candidates[rng.IntN(len(candidates))]
		if _, held := m[seq]; held {
			x.remove(seq)
			delete(m, seq)
		} else {
			off := uint64(rng.IntN(1000))
			x.put(seq, off)
			m[seq] = off
		}
		overflowed = overflowed || len(x.overflow) > 0
		for _, c := range candidates {
			got, gok := x.get(c)
			want, wok := m[c]
			if got != want || gok != wok {
				t.Fatalf("op %d: get(%d) = %d,%v; the map says %d,%v", i, c, got, gok, want, wok)
			}
		}
	}
	if !overflowed {
		t.Fatal("no sequence went to the overflow map")
	}
}

// An index grows with its ring: a producer out of order after a few
// records keeps a few slots, not slots for the whole bound.
func TestIndexGrowsWithTheRing(t *testing.T) {
	w := New(DefaultPerProducer, 1)
	w.Record("p", 2, 0)
	w.Record("p", 1, 1)
	p := w.byName["p"]
	if p.seqs == nil {
		t.Fatal("a ring out of order has no index")
	}
	if n := len(p.seqs.slots); n > 8 {
		t.Fatalf("two sequences out of order: %d slots", n)
	}
	for seq := uint64(3); seq < 600; seq += 2 {
		// Pairs out of order keep the ring out of order as it grows.
		w.Record("p", seq+1, seq+1)
		w.Record("p", seq, seq)
		if n, held := len(p.seqs.slots), len(p.ring); n < 2*held || n > 8*held {
			t.Fatalf("a ring of %d: %d slots, want %d to %d", held, n, 2*held, 8*held)
		}
	}
	for seq := uint64(1); seq < 601; seq++ {
		if off, ok := w.Lookup("p", seq); !ok || off != seq && seq > 2 {
			t.Fatalf("Lookup(%d) = %d,%v", seq, off, ok)
		}
	}
	// A full ring's index is no larger than twice the ring's bound.
	for seq := uint64(601); seq < 3000; seq += 2 {
		w.Record("p", seq+1, seq+1)
		w.Record("p", seq, seq)
	}
	if n := len(p.seqs.slots); len(p.ring) != DefaultPerProducer || n != 2*DefaultPerProducer {
		t.Fatalf("a ring of %d (bound %d): %d slots, want %d", len(p.ring), DefaultPerProducer, n, 2*DefaultPerProducer)
	}
}
