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
package dedupe

import "container/list"

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
	lru         *list.List // of *producer, most recently used in front
	byName      map[string]*list.Element
}

type producer struct {
	name  string
	seqs  map[uint64]uint64 // sequence -> offset of its first write
	order []uint64          // ring of sequences in write order, for eviction
	next  int               // ring index of the oldest entry once full
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
		lru:         list.New(),
		byName:      make(map[string]*list.Element),
	}
}

// Lookup returns the offset of seq's first write by producer, if the window
// still holds it. A hit counts as a use of the producer.
func (w *Window) Lookup(name string, seq uint64) (uint64, bool) {
	e, ok := w.byName[name]
	if !ok {
		return 0, false
	}
	w.lru.MoveToFront(e)
	off, ok := e.Value.(*producer).seqs[seq]
	return off, ok
}

// Record remembers that producer wrote seq at offset. A sequence already
// held keeps its first offset.
func (w *Window) Record(name string, seq, offset uint64) {
	e, ok := w.byName[name]
	if !ok {
		if w.lru.Len() >= w.maxProducer {
			oldest := w.lru.Back()
			w.lru.Remove(oldest)
			delete(w.byName, oldest.Value.(*producer).name)
		}
		e = w.lru.PushFront(&producer{name: name, seqs: make(map[uint64]uint64)})
		w.byName[name] = e
	} else {
		w.lru.MoveToFront(e)
	}
	p := e.Value.(*producer)
	if _, held := p.seqs[seq]; held {
		return
	}
	if len(p.order) < w.perProducer {
		p.order = append(p.order, seq)
	} else {
		delete(p.seqs, p.order[p.next])
		p.order[p.next] = seq
		p.next = (p.next + 1) % w.perProducer
	}
	p.seqs[seq] = offset
}

// Producers returns how many producers the window holds.
func (w *Window) Producers() int { return w.lru.Len() }
