package frame

import "encoding/binary"

// maxHeaderLen is the longest encoding of a batch's header and its record
// run's count and first offset: the frame header, five uvarints of at most
// 10 bytes, the 8-byte head digest, and the count and first offset.
const maxHeaderLen = headerLen + 5*binary.MaxVarintLen64 + 8 + 2*binary.MaxVarintLen64

// BatchWriter encodes a batch whose records are added one at a time, each
// copied into the frame as it is added, so that a producer reading
// records from storage never holds them in a slice of its own (and its
// storage's buffers may be reused as soon as Add returns). The bytes it
// produces are exactly AppendBatch's for the same batch.
//
// The header fields come last (Finish), since a batch's count and
// watermarks are known only once its records are: the writer leaves room
// for the longest header before the records and writes the header right
// before them.
type BatchWriter struct {
	buf   []byte
	n     int
	first uint64
	prev  int64 // the previous record's time
}

// NewBatchWriter returns a writer whose buffer holds sizeHint record bytes
// (and their framing) without growing.
func NewBatchWriter(sizeHint int) *BatchWriter {
	w := &BatchWriter{}
	w.Reset(sizeHint)
	return w
}

// Reset starts a new batch in the writer's buffer, grown to hold sizeHint
// record bytes if it is smaller. The frame Finish returned last is
// overwritten.
func (w *BatchWriter) Reset(sizeHint int) {
	buf := w.buf
	if need := maxHeaderLen + sizeHint + binary.MaxVarintLen64; cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	*w = BatchWriter{buf: buf[:maxHeaderLen]}
}

// Add appends the record at offset, which must be the first offset (for
// the first record) or follow the previous record's.
func (w *BatchWriter) Add(offset uint64, timeNS int64, data []byte) {
	if w.n == 0 {
		w.first = offset
	}
	w.buf = binary.AppendVarint(w.buf, timeNS-w.prev)
	w.prev = timeNS
	w.buf = binary.AppendUvarint(w.buf, uint64(len(data)))
	w.buf = append(w.buf, data...)
	w.n++
}

// Len is how many records were added.
func (w *BatchWriter) Len() int { return w.n }

// Finish returns the encoded batch with b's header fields and cursor
// events; b.Records is ignored (the added records are the batch's). Call
// it once per batch. The result aliases the writer's buffer, which Reset
// reuses.
func (w *BatchWriter) Finish(b *Batch) []byte {
	var hdr [maxHeaderLen]byte
	h := appendBatchHead(hdr[:0], b, w.n, w.first)
	start := maxHeaderLen - len(h)
	copy(w.buf[start:], h)
	out := appendCursorEvents(w.buf, b.CursorEvents)
	w.buf = out
	return out[start:]
}
