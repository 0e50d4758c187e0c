// Package dedupe is the owner's bounded memory of recent producer
// sequences, used to answer a repeated publish (same Brook-Producer and
// Brook-Seq) with the offset of its first write instead of writing it again.
//
// The window itself lives in the owner's memory. The producer and sequence
// are also stored with each record (package envelope), so a host filling
// the owner role (a promotion after a failover, or a restart) rebuilds the
// window from the newest records of its log before it takes publishes; a
// retry of a record older than that rebuild reaches is written again. The
// window bounds both the sequences kept per producer (oldest written first
// out) and the producers kept (least recently used out).
//
// # Cost per record
//
// The owner looks up and records every record it is sent, and each
// follower records every record it applies, so the window is on the path
// of every record. A producer's sequences are kept in a ring in write
// order. A producer that writes its sequences in increasing order (the
// usual case: a client numbers its records as it publishes them) needs
// nothing more: a lookup is a comparison with the newest sequence and, for
// a retry, a binary search of the ring, and a record overwrites the ring's
// oldest slot. Only a producer whose ring holds sequences out of order
// also gets an index from sequence to offset (index.go: a slot per
// sequence modulo at least twice the ring's length, a map for the rare
// sequences whose slot is taken), which it keeps until the ring is in
// order again (as many in-order writes as the ring holds). Concurrent
// publishes of one producer reach the owner in that order: in a
// window-256 run, 30 ns a record with the index against 120 with a map
// (BenchmarkWindowConcurrentPublishes).
package dedupe

import (
	"cmp"
	"slices"
	"sort"
)

// Defaults of the window's bounds.
const (
	DefaultPerProducer = 1024
	DefaultProducers   = 10000
)

// Window remembers, per producer, the offsets of its last sequences. It is
// not safe for concurrent use: the owner's single appender goroutine owns it.
type Window struct {
	perProducer int
	maxProducer int
	byName      map[string]*producer
	// clock counts uses; a producer's used is the clock at its last use.
	clock uint64
	// evictable is the least recently used producers, oldest first, as
	// they were when it was made (evictOne).
	evictable []candidate
}

// evictableShare is the part of the producers (one in evictableShare)
// that evictOne lists as the least recently used when it rebuilds its list.
const evictableShare = 4

// candidate is a producer found among the least recently used, and its
// use then: it is still the least recently used if that has not changed.
type candidate struct {
	p    *producer
	used uint64
}

// written is one sequence a producer wrote and the offset of its first
// write.
type written struct {
	seq, off uint64
}

type producer struct {
	name string
	used uint64 // Window.clock at its last lookup or record
	// last is the newest entry's sequence, kept here so that a new
	// sequence is told from a retry without reading the ring.
	last uint64
	// ring holds the producer's last sequences in write order: the oldest
	// at start once the ring is full (len(ring) == perProducer), at 0
	// before.
	ring  []written
	start int
	// inOrder counts the newest entries of the ring whose sequences
	// increase in write order; the whole ring is in order when it is
	// len(ring).
	inOrder int
	// seqs indexes the ring by sequence while the ring is not in order;
	// nil when it is.
	seqs *seqIndex
}

// at returns the ring's i-th entry in write order.
func (p *producer) at(i int) written {
	return p.ring[(p.start+i)%len(p.ring)]
}

func (p *producer) lookup(seq uint64) (uint64, bool) {
	if p.seqs != nil {
		return p.seqs.get(seq)
	}
	n := len(p.ring)
	if n == 0 || seq > p.last || seq < p.at(0).seq {
		return 0, false
	}
	i := sort.Search(n, func(i int) bool { return p.at(i).seq >= seq })
	if e := p.at(i); e.seq == seq {
		return e.off, true
	}
	return 0, false
}

// add appends a sequence the ring does not hold, dropping the oldest one
// when the ring is full.
func (p *producer) add(seq, off uint64, perProducer int) {
	if len(p.ring) > 0 && seq < p.last {
		if p.seqs == nil {
			// The ring goes out of order: index it.
			p.indexRing(min(len(p.ring)+1, perProducer))
		}
		p.inOrder = 0
	}
	p.inOrder++
	p.last = seq
	e := written{seq, off}
	if len(p.ring) < perProducer {
		p.ring = append(p.ring, e)
	} else {
		if p.seqs != nil {
			p.seqs.remove(p.ring[p.start].seq)
		}
		p.ring[p.start] = e
		p.start = (p.start + 1) % len(p.ring)
	}
	if p.seqs == nil {
		return
	}
	if p.inOrder >= len(p.ring) {
		p.seqs = nil // in order again: the ring alone answers
		return
	}
	if p.seqs.full(len(p.ring)) {
		// The index grows with the ring, not at once to the ring's
		// bound: a producer out of order after a few records keeps a
		// small one. The new index holds e too.
		p.indexRing(min(2*len(p.ring), perProducer))
		return
	}
	p.seqs.put(seq, off)
}

// indexRing indexes the ring's entries in a new index for a ring of up to
// n (its slots: newSeqIndex).
func (p *producer) indexRing(n int) {
	p.seqs = newSeqIndex(n)
	for _, e := range p.ring {
		p.seqs.put(e.seq, e.off)
	}
}

// New returns a window keeping at most perProducer sequences for each of at
// most producers producers; values below 1 take the defaults.
func New(perProducer, producers int) *Window {
	if perProducer < 1 {
		perProducer = DefaultPerProducer
	}
	if producers < 1 {
		producers = DefaultProducers
	}
	return &Window{
		perProducer: perProducer,
		maxProducer: producers,
		byName:      make(map[string]*producer),
	}
}

// Lookup returns the offset of seq's first write by producer, if the window
// still holds it. A hit counts as a use of the producer.
func (w *Window) Lookup(name string, seq uint64) (uint64, bool) {
	p, ok := w.byName[name]
	if !ok {
		return 0, false
	}
	w.clock++
	p.used = w.clock
	return p.lookup(seq)
}

// Record remembers that producer wrote seq at offset. A sequence already
// held keeps its first offset.
func (w *Window) Record(name string, seq, offset uint64) {
	p, ok := w.byName[name]
	if !ok {
		p = w.newProducer(name)
	}
	w.record(p, seq, offset)
}

// RecordBytes is Record of a name in bytes (a stored record's envelope),
// which it copies only for a producer new to the window.
func (w *Window) RecordBytes(name []byte, seq, offset uint64) {
	p, ok := w.byName[string(name)] // a lookup by bytes copies nothing
	if !ok {
		p = w.newProducer(string(name))
	}
	w.record(p, seq, offset)
}

// newProducer adds a producer the window does not hold, evicting the
// least recently used one if the window is full.
func (w *Window) newProducer(name string) *producer {
	if len(w.byName) >= w.maxProducer {
		w.evictOne()
	}
	p := &producer{name: name}
	w.byName[name] = p
	return p
}

// record is Record once the producer is found: a use of it, and seq at
// offset unless it holds seq already.
func (w *Window) record(p *producer, seq, offset uint64) {
	w.clock++
	p.used = w.clock
	if _, held := p.lookup(seq); held {
		return
	}
	p.add(seq, offset, w.perProducer)
}

// evictOne drops the least recently used producer. It takes it from
// evictable, the least recently used quarter of the producers as they
// were when it was made, skipping those used since: the first one not used
// since is older than every producer outside the list. Once the list is
// used up it is made again, so a full window sorts its producers once per
// many new ones, not once each.
func (w *Window) evictOne() {
	for {
		for len(w.evictable) > 0 {
			c := w.evictable[0]
			w.evictable = w.evictable[1:]
			if c.p.used == c.used && w.byName[c.p.name] == c.p {
				delete(w.byName, c.p.name)
				return
			}
		}
		all := make([]candidate, 0, len(w.byName))
		for _, p := range w.byName {
			all = append(all, candidate{p, p.used})
		}
		// Reading every producer's use is most of a rebuild's cost (a
		// cache miss each), so the list is a quarter of them, and only
		// that quarter is sorted: with a sixteenth and a sort of them all
		// an eviction cost about 3.5 µs in BenchmarkWindowEvictionChurn's
		// worst case.
		k := max(len(all)/evictableShare, 1)
		selectOldest(all, k)
		oldest := slices.Clone(all[:k])
		slices.SortFunc(oldest, func(a, b candidate) int { return cmp.Compare(a.used, b.used) })
		w.evictable = oldest
	}
}

// selectOldest moves the k least recently used of cs to its front, in no
// particular order (a quickselect: linear time on average). Uses are
// distinct, since each takes the next tick of the window's clock.
func selectOldest(cs []candidate, k int) {
	lo, hi := 0, len(cs)-1
	for lo < hi {
		pivot := cs[lo+(hi-lo)/2].used
		i, j := lo, hi
		for i <= j {
			for cs[i].used < pivot {
				i++
			}
			for cs[j].used > pivot {
				j--
			}
			if i <= j {
				cs[i], cs[j] = cs[j], cs[i]
				i++
				j--
			}
		}
		// cs[lo..j] <= pivot <= cs[i..hi], and between them equal to it.
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}

// Producers returns how many producers the window holds.
func (w *Window) Producers() int { return len(w.byName) }
