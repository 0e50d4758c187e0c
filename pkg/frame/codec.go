package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/brook-streams/brook/pkg/wire"
)

// Frame header bytes. Every frame starts with Magic, Version and a kind
// byte, so a receiver tells a frame from a JSON body (which starts with '{'
// or whitespace) and from a frame of another kind or a future layout.
//
// Version 2 added the batch's head digest and the replication request's
// tail digest (log matching); a version 1 frame is rejected.
const (
	Magic   byte = 0xB5
	Version byte = 2

	KindBatch       byte = 0x01
	KindReplRequest byte = 0x02

	headerLen = 3
)

// Decoder limits. They bound what an untrusted frame can make a decoder
// allocate beyond the frame itself; producers must split larger batches.
const (
	// MaxBatchRecords bounds the record count and, separately, the cursor
	// event count of one batch.
	MaxBatchRecords = 1 << 20
	// MaxRecordSize bounds one record's data.
	MaxRecordSize = 64 << 20
)

// ErrMalformed is wrapped by every decode error caused by the input, so a
// caller can answer with a bad-request code without string matching.
var ErrMalformed = errors.New("malformed frame")

// Minimum encoded sizes, used to reject counts that cannot fit in the
// remaining input before anything is allocated for them.
const (
	minRecordLen = 2 // time delta varint + data length varint
	minEventLen  = 3 // name length varint + 1 name byte + position varint
	// maxRecordOverhead is the most a record's time delta and data length
	// add to its data.
	maxRecordOverhead = 2 * binary.MaxVarintLen64
)

func appendBatch(dst []byte, b *Batch) []byte {
	// Grow once: appending a large batch piece by piece would copy it
	// again at every doubling.
	size := maxHeaderLen + 2*binary.MaxVarintLen64
	for i := range b.Records {
		size += len(b.Records[i].Data) + maxRecordOverhead
	}
	for i := range b.CursorEvents {
		size += len(b.CursorEvents[i].Cursor) + 2*binary.MaxVarintLen64
	}
	dst = slices.Grow(dst, size)
	var first uint64
	if len(b.Records) > 0 {
		first = b.Records[0].Offset
	}
	dst = appendBatchHead(dst, b, len(b.Records), first)
	if len(b.Records) > 0 {
		// Times are deltas from the previous record: records written
		// together have close times, so a delta takes 1-4 bytes where an
		// absolute nanosecond time takes 9. Wrapping arithmetic is exact.
		var prev int64
		for i := range b.Records {
			r := &b.Records[i]
			dst = binary.AppendVarint(dst, r.TimeNS-prev)
			prev = r.TimeNS
			dst = binary.AppendUvarint(dst, uint64(len(r.Data)))
			dst = append(dst, r.Data...)
		}
	}

	return appendCursorEvents(dst, b.CursorEvents)
}

// appendBatchHead appends a batch's header fields and the head of its
// record run: n records from offset first.
func appendBatchHead(dst []byte, b *Batch, n int, first uint64) []byte {
	dst = append(dst, Magic, Version, KindBatch)
	dst = binary.AppendUvarint(dst, b.Epoch)
	dst = binary.AppendUvarint(dst, b.Head)
	// Digests are uniformly spread 64-bit values: fixed width is shorter
	// than a varint for almost all of them.
	dst = binary.BigEndian.AppendUint64(dst, b.HeadDigest)
	dst = binary.AppendUvarint(dst, b.Tail)
	dst = binary.AppendUvarint(dst, b.Confirmed)
	dst = binary.AppendUvarint(dst, b.Next)
	// Offsets are contiguous by contract, so only the first one travels.
	dst = binary.AppendUvarint(dst, uint64(n))
	if n > 0 {
		dst = binary.AppendUvarint(dst, first)
	}
	return dst
}

// appendCursorEvents appends a batch's cursor event run, its last part.
func appendCursorEvents(dst []byte, evs []CursorEvent) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(evs)))
	if len(evs) > 0 {
		dst = binary.AppendUvarint(dst, evs[0].Offset)
		for i := range evs {
			e := &evs[i]
			dst = binary.AppendUvarint(dst, uint64(len(e.Cursor)))
			dst = append(dst, e.Cursor...)
			dst = binary.AppendUvarint(dst, e.Position)
		}
	}
	return dst
}

func decodeBatch(p []byte) (*Batch, error) {
	d := decoder{p: p}
	if err := d.header(KindBatch); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	b := &Batch{}
	// Direct reads rather than a loop over field pointers: the loop's
	// table costs allocations on every decode.
	var err error
	if b.Epoch, err = d.uvarint("epoch"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if b.Head, err = d.uvarint("head"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if b.HeadDigest, err = d.u64("head digest"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if b.Tail, err = d.uvarint("tail"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if b.Confirmed, err = d.uvarint("confirmed"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if b.Next, err = d.uvarint("next"); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}

	n, first, err := d.run("record", minRecordLen)
	if err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if n > 0 {
		b.Records = make([]Record, n)
		var prev int64
		for i := range b.Records {
			delta, err := d.varint("record time")
			if err != nil {
				return nil, fmt.Errorf("frame: batch: record %d: %w", i, err)
			}
			size, err := d.uvarint("record length")
			if err != nil {
				return nil, fmt.Errorf("frame: batch: record %d: %w", i, err)
			}
			if size > MaxRecordSize {
				return nil, fmt.Errorf("frame: batch: record %d: length %d over the limit %d: %w", i, size, MaxRecordSize, ErrMalformed)
			}
			data, err := d.bytes(size)
			if err != nil {
				return nil, fmt.Errorf("frame: batch: record %d: %w", i, err)
			}
			prev += delta
			b.Records[i] = Record{Offset: first + uint64(i), TimeNS: prev, Data: data}
		}
	}

	n, first, err = d.run("cursor event", minEventLen)
	if err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	if n > 0 {
		b.CursorEvents = make([]CursorEvent, n)
		for i := range b.CursorEvents {
			name, err := d.name()
			if err != nil {
				return nil, fmt.Errorf("frame: batch: cursor event %d: %w", i, err)
			}
			pos, err := d.uvarint("cursor position")
			if err != nil {
				return nil, fmt.Errorf("frame: batch: cursor event %d: %w", i, err)
			}
			b.CursorEvents[i] = CursorEvent{Offset: first + uint64(i), Cursor: name, Position: pos}
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: batch: %w", err)
	}
	return b, nil
}

func appendReplRequest(dst []byte, r *ReplRequest) []byte {
	dst = append(dst, Magic, Version, KindReplRequest)
	dst = binary.AppendUvarint(dst, uint64(len(r.Node)))
	dst = append(dst, r.Node...)
	dst = binary.AppendUvarint(dst, r.Epoch)
	dst = binary.AppendUvarint(dst, r.StreamID)
	dst = binary.AppendUvarint(dst, r.RecordTail)
	dst = binary.AppendUvarint(dst, r.CursorTail)
	dst = binary.AppendUvarint(dst, uint64(r.WaitMS))
	dst = binary.AppendUvarint(dst, uint64(r.MaxBytes))
	dst = binary.BigEndian.AppendUint64(dst, r.TailDigest)
	if r.ReadFrom > r.RecordTail {
		dst = binary.AppendUvarint(dst, r.ReadFrom-r.RecordTail)
		dst = binary.BigEndian.AppendUint64(dst, r.ReadDigest)
	}
	return dst
}

func decodeReplRequest(p []byte) (*ReplRequest, error) {
	d := decoder{p: p}
	if err := d.header(KindReplRequest); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	r := &ReplRequest{}
	var err error
	if r.Node, err = d.name(); err != nil {
		return nil, fmt.Errorf("frame: repl request: node: %w", err)
	}
	if r.Epoch, err = d.uvarint("epoch"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.StreamID, err = d.uvarint("stream id"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.RecordTail, err = d.uvarint("record tail"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.CursorTail, err = d.uvarint("cursor tail"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.WaitMS, err = d.uvarint32("wait ms"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.MaxBytes, err = d.uvarint32("max bytes"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if r.TailDigest, err = d.u64("tail digest"); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	if d.rest() > 0 {
		// The optional read position, past the record tail.
		ahead, err := d.uvarint("read ahead")
		if err != nil {
			return nil, fmt.Errorf("frame: repl request: %w", err)
		}
		if ahead == 0 || ahead > math.MaxUint64-r.RecordTail {
			return nil, fmt.Errorf("frame: repl request: read ahead %d past record tail %d: %w", ahead, r.RecordTail, ErrMalformed)
		}
		r.ReadFrom = r.RecordTail + ahead
		if r.ReadDigest, err = d.u64("read digest"); err != nil {
			return nil, fmt.Errorf("frame: repl request: %w", err)
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: repl request: %w", err)
	}
	return r, nil
}

// decoder reads a frame front to back; every read checks the remaining input.
type decoder struct {
	p   []byte
	off int
}

func (d *decoder) rest() int { return len(d.p) - d.off }

func (d *decoder) header(kind byte) error {
	if d.rest() < headerLen {
		return fmt.Errorf("%d bytes, shorter than the %d-byte header: %w", len(d.p), headerLen, ErrMalformed)
	}
	h := d.p[:headerLen]
	if h[0] != Magic {
		return fmt.Errorf("magic byte 0x%02x, want 0x%02x: %w", h[0], Magic, ErrMalformed)
	}
	if h[1] != Version {
		return fmt.Errorf("version %d, this decoder reads %d: %w", h[1], Version, ErrMalformed)
	}
	if h[2] != kind {
		return fmt.Errorf("kind 0x%02x, want 0x%02x: %w", h[2], kind, ErrMalformed)
	}
	d.off = headerLen
	return nil
}

// uvarint reads a minimally encoded uvarint. Rejecting padded encodings
// keeps the encoding canonical: a frame that decodes re-encodes to itself.
func (d *decoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.p[d.off:])
	switch {
	case n == 0:
		return 0, fmt.Errorf("%s: truncated varint at byte %d: %w", what, d.off, ErrMalformed)
	case n < 0:
		return 0, fmt.Errorf("%s: varint overflows 64 bits at byte %d: %w", what, d.off, ErrMalformed)
	case n > 1 && d.p[d.off+n-1] == 0:
		return 0, fmt.Errorf("%s: non-minimal varint at byte %d: %w", what, d.off, ErrMalformed)
	}
	d.off += n
	return v, nil
}

// varint reads a minimally encoded zigzag varint.
func (d *decoder) varint(what string) (int64, error) {
	u, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	// Zigzag, as binary.AppendVarint writes it.
	return int64(u>>1) ^ -int64(u&1), nil
}

// u64 reads a fixed 8-byte big-endian integer.
func (d *decoder) u64(what string) (uint64, error) {
	if d.rest() < 8 {
		return 0, fmt.Errorf("%s: %d bytes left of 8 at byte %d: %w", what, d.rest(), d.off, ErrMalformed)
	}
	v := binary.BigEndian.Uint64(d.p[d.off:])
	d.off += 8
	return v, nil
}

func (d *decoder) uvarint32(what string) (uint32, error) {
	v, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, fmt.Errorf("%s: %d does not fit 32 bits: %w", what, v, ErrMalformed)
	}
	return uint32(v), nil
}

// bytes returns the next n bytes, aliasing the input. The capacity is cut
// to the length so that a caller appending to one record's data cannot
// overwrite the next record.
func (d *decoder) bytes(n uint64) ([]byte, error) {
	if n > uint64(d.rest()) {
		return nil, fmt.Errorf("length %d exceeds the %d remaining bytes: %w", n, d.rest(), ErrMalformed)
	}
	end := d.off + int(n)
	b := d.p[d.off:end:end]
	d.off = end
	return b, nil
}

// name reads a length-prefixed stream, cursor or node name and checks it
// against wire.NameRE without a regexp (decoding is on the hot path).
func (d *decoder) name() (string, error) {
	n, err := d.uvarint("name length")
	if err != nil {
		return "", err
	}
	if n == 0 || n > wire.MaxNameLen {
		return "", fmt.Errorf("name length %d, want 1 to %d: %w", n, wire.MaxNameLen, ErrMalformed)
	}
	b, err := d.bytes(n)
	if err != nil {
		return "", fmt.Errorf("name: %w", err)
	}
	for _, c := range b {
		if !nameByte(c) {
			return "", fmt.Errorf("name holds byte 0x%02x, outside [A-Za-z0-9_-]: %w", c, ErrMalformed)
		}
	}
	return string(b), nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// run reads the count of a contiguous run of entries and, if there are any,
// its first offset. The count is checked against the remaining input (each
// entry takes at least minLen bytes) and MaxBatchRecords before the caller
// allocates for it, and the run's last offset must fit 64 bits.
func (d *decoder) run(what string, minLen int) (n int, first uint64, err error) {
	// Context strings are built only on error: concatenating them up
	// front would allocate on every decode.
	count, err := d.uvarint("count")
	if err != nil {
		return 0, 0, fmt.Errorf("%s %w", what, err)
	}
	if count == 0 {
		return 0, 0, nil
	}
	if count > MaxBatchRecords {
		return 0, 0, fmt.Errorf("%s count %d over the limit %d: %w", what, count, MaxBatchRecords, ErrMalformed)
	}
	if count > uint64(d.rest()/minLen) {
		return 0, 0, fmt.Errorf("%s count %d cannot fit in the %d remaining bytes: %w", what, count, d.rest(), ErrMalformed)
	}
	first, err = d.uvarint("first offset")
	if err != nil {
		return 0, 0, fmt.Errorf("%s %w", what, err)
	}
	if count-1 > math.MaxUint64-first {
		return 0, 0, fmt.Errorf("%s offsets from %d for %d entries overflow 64 bits: %w", what, first, count, ErrMalformed)
	}
	return int(count), first, nil
}

func (d *decoder) end() error {
	if d.rest() != 0 {
		return fmt.Errorf("%d trailing bytes: %w", d.rest(), ErrMalformed)
	}
	return nil
}
