package streamlog

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// # Record batches
//
// A copy's records are stored in batches, one Pebble key per batch, not
// one per record: a memtable insert, a flushed entry and a compacted
// entry cost per key, and a batch of a few hundred records costs about
// what one record did (issue 16). A batch is keyed by the offset of its
// last record; batches hold contiguous records and never overlap, so the
// batch holding offset o is the first key at or after batchKey(id, o).
//
// A batch value is count(4), then per record length(4) and the record's
// entry: digest(8), cum(8), time ns(8), data. An entry is what layout 1
// stored as a record's whole value (decodeRecordValue reads both).
//
// Each write request is cut into batches of at most maxBatchRecords
// records and (past the first record) maxBatchBytes bytes, so that a point
// read (DigestAt, a cut's digest) loads a bounded value. Retention keeps a
// batch until its last record goes: the records below the head in the
// batch that holds the head are kept, and never read (reads start at the
// head). A cut rewrites the batch that holds its last kept record, if the
// batch goes on past it.

const (
	batchCountLen = 4
	entryLenLen   = 4

	maxBatchRecords = 256
	maxBatchBytes   = 64 << 10
)

// entrySize is the bytes a record of data takes in a batch value.
func entrySize(data []byte) int { return entryLenLen + recordHeaderLen + len(data) }

// batchFull reports whether a batch of n records whose value has size
// bytes takes no more, next being the record after them: it holds
// maxBatchRecords, or next would take it past maxBatchBytes of entries (a
// batch's first record always fits, whatever its size).
func batchFull(n, size int, next []byte) bool {
	return n >= maxBatchRecords || (n > 0 && size+entrySize(next) > batchCountLen+maxBatchBytes)
}

// chunkEnd returns where the batch that starts at data[i] ends (exclusive)
// and its value's size.
func chunkEnd(data [][]byte, i int) (j, size int) {
	j, size = i, batchCountLen
	for j < len(data) && !batchFull(j-i, size, data[j]) {
		size += entrySize(data[j])
		j++
	}
	return j, size
}

// batchReader walks the records of one batch value.
type batchReader struct {
	v     []byte
	first uint64 // offset of the batch's first record
	n     uint64 // records in the batch
	i     uint64 // index of the current record
	pos   int    // where the current record's length prefix is
}

func openBatch(key, v []byte) (batchReader, error) {
	last, err := keyOffset(key)
	if err != nil {
		return batchReader{}, err
	}
	if len(v) < batchCountLen {
		return batchReader{}, fmt.Errorf("streamlog: batch %d has %d bytes, less than its count", last, len(v))
	}
	n := uint64(binary.BigEndian.Uint32(v))
	if n == 0 || n > last+1 {
		return batchReader{}, fmt.Errorf("streamlog: batch %d counts %d records", last, n)
	}
	return batchReader{v: v, first: last + 1 - n, n: n, pos: batchCountLen}, nil
}

// offset is the current record's offset.
func (b *batchReader) offset() uint64 { return b.first + b.i }

// entry returns the current record's entry and where the next one starts.
func (b *batchReader) entry() ([]byte, int, error) {
	if b.pos+entryLenLen > len(b.v) {
		return nil, 0, fmt.Errorf("streamlog: batch of record %d is truncated", b.offset())
	}
	l := int(binary.BigEndian.Uint32(b.v[b.pos:]))
	start := b.pos + entryLenLen
	if l < recordHeaderLen || l > len(b.v)-start {
		return nil, 0, fmt.Errorf("streamlog: record %d has a bad length %d in its batch", b.offset(), l)
	}
	return b.v[start : start+l], start + l, nil
}

// advance moves to the next record of the batch; false past the last.
func (b *batchReader) advance() (bool, error) {
	_, next, err := b.entry()
	if err != nil {
		return false, err
	}
	b.i++
	b.pos = next
	if b.i == b.n && b.pos != len(b.v) {
		return false, fmt.Errorf("streamlog: batch of record %d has %d bytes past its last record", b.offset()-1, len(b.v)-b.pos)
	}
	return b.i < b.n, nil
}

// recordIter iterates over a copy's records, batch by batch. The entry it
// is at aliases Pebble's memory: valid until it moves or closes.
type recordIter struct {
	it   *pebble.Iterator
	id   uint64
	b    batchReader
	ok   bool
	err  error
	kbuf [offsetKeyLen]byte

	off  uint64
	meta recordMeta
	data []byte
}

func newRecordIter(db *pebble.DB, id uint64) (*recordIter, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: batchKey(id, 0), UpperBound: recordLogEnd(id)})
	if err != nil {
		return nil, err
	}
	return &recordIter{it: it, id: id}, nil
}

// close closes the iterator and returns the first error it met.
func (r *recordIter) close() error {
	err := r.it.Close()
	if r.err != nil {
		return r.err
	}
	return err
}

// seekGE moves to the record at off or, if the copy holds none there, to
// the first record past it; false if there is none (or on an error, which
// close returns).
func (r *recordIter) seekGE(off uint64) bool {
	putBatchKey(r.kbuf[:], r.id, off)
	if !r.it.SeekGE(r.kbuf[:]) {
		return r.stop(r.it.Error())
	}
	return r.load(off)
}

// last moves to the copy's last record.
func (r *recordIter) last() bool {
	if !r.it.Last() {
		return r.stop(r.it.Error())
	}
	return r.load(^uint64(0))
}

// next moves to the next record.
func (r *recordIter) next() bool {
	if !r.ok {
		return false
	}
	more, err := r.b.advance()
	if err != nil {
		return r.stop(err)
	}
	if more {
		return r.decode()
	}
	if !r.it.Next() {
		return r.stop(r.it.Error())
	}
	return r.load(0)
}

// load opens the batch the Pebble iterator is at and moves to its record
// at off, to its first if off is below it, or to its last if off is past
// it.
func (r *recordIter) load(off uint64) bool {
	// A batch's value may be in a blob file (store.go, valueSeparation):
	// reading it can fail, and the failure is the read's error, not a
	// malformed batch.
	v, err := r.it.ValueAndErr()
	if err != nil {
		return r.stop(fmt.Errorf("read batch: %w", err))
	}
	b, err := openBatch(r.it.Key(), v)
	if err != nil {
		return r.stop(err)
	}
	r.b = b
	for r.b.offset() < off && r.b.i+1 < r.b.n {
		if _, err := r.b.advance(); err != nil {
			return r.stop(err)
		}
	}
	return r.decode()
}

func (r *recordIter) decode() bool {
	e, _, err := r.b.entry()
	if err != nil {
		return r.stop(err)
	}
	m, data, err := decodeRecordValue(e)
	if err != nil {
		return r.stop(fmt.Errorf("record %d: %w", r.b.offset(), err))
	}
	r.off, r.meta, r.data, r.ok = r.b.offset(), m, data, true
	return true
}

func (r *recordIter) stop(err error) bool {
	r.ok = false
	if err != nil && r.err == nil {
		r.err = err
	}
	return false
}

// cutBatchAt returns the batch that holds the record at tail-1 cut to end
// there, with its key, if that batch goes on past it: a cut to tail
// deletes every batch keyed at tail or above, and writes this one back.
func cutBatchAt(db *pebble.DB, id, tail uint64) (kv, bool, error) {
	if tail == 0 {
		return kv{}, false, nil
	}
	ri, err := newRecordIter(db, id)
	if err != nil {
		return kv{}, false, err
	}
	var out kv
	found := false
	if ri.seekGE(tail-1) && ri.off == tail-1 && ri.b.first+ri.b.n-1 >= tail {
		_, end, err := ri.b.entry()
		if err != nil {
			_ = ri.close()
			return kv{}, false, err
		}
		v := make([]byte, end)
		copy(v, ri.b.v[:end])
		binary.BigEndian.PutUint32(v, uint32(ri.b.i+1))
		out, found = kv{k: batchKey(id, tail-1), v: v}, true
	}
	if err := ri.close(); err != nil {
		return kv{}, false, err
	}
	return out, found, nil
}
