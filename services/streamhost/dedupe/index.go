package dedupe

import "math/bits"

// seqIndex maps sequence to offset for a producer whose ring is out of
// order. Slot seq&mask holds one sequence that falls on it; a sequence
// whose slot is taken goes to the overflow map. A producer's sequences
// are dense and close together (a client numbers its records as it
// publishes them, and concurrent publishes reorder them only within those
// in flight), so with at least twice as many slots as the ring holds
// sequences (the index grows with the ring: full) they rarely meet, and a
// lookup is one array read where a map cost a hash and a probe of a table
// the size of the ring (BenchmarkWindowConcurrentPublishes).
type seqIndex struct {
	slots    []indexSlot
	mask     uint64
	overflow map[uint64]uint64
}

// indexSlot is one sequence and its offset plus one; a zero offPlus is
// an empty slot (an offset is never the largest uint64).
type indexSlot struct {
	seq, offPlus uint64
}

// newSeqIndex returns an index with at least twice ringLen slots.
func newSeqIndex(ringLen int) *seqIndex {
	n := uint64(1) << bits.Len(uint(2*ringLen-1))
	return &seqIndex{slots: make([]indexSlot, n), mask: n - 1}
}

// full reports whether an index of a ring of ringLen sequences has fewer
// than twice as many slots: the producer then indexes its ring anew in a
// larger one (producer.add), so that the index grows with the ring, a
// doubling at a time.
func (x *seqIndex) full(ringLen int) bool { return 2*ringLen > len(x.slots) }

func (x *seqIndex) get(seq uint64) (uint64, bool) {
	if s := x.slots[seq&x.mask]; s.offPlus != 0 && s.seq == seq {
		return s.offPlus - 1, true
	}
	if x.overflow == nil {
		return 0, false
	}
	off, ok := x.overflow[seq]
	return off, ok
}

// put adds a sequence the index does not hold.
func (x *seqIndex) put(seq, off uint64) {
	if s := &x.slots[seq&x.mask]; s.offPlus == 0 {
		s.seq, s.offPlus = seq, off+1
		return
	}
	if x.overflow == nil {
		x.overflow = make(map[uint64]uint64)
	}
	x.overflow[seq] = off
}

// remove drops a sequence the index holds.
func (x *seqIndex) remove(seq uint64) {
	if s := &x.slots[seq&x.mask]; s.offPlus != 0 && s.seq == seq {
		*s = indexSlot{}
		return
	}
	delete(x.overflow, seq)
}
