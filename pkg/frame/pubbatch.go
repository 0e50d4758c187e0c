package frame

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Publish batch frame kinds (schemas/frames.md). They came with version 2
// unchanged: the bytes of the batch and replication request frames did not
// change, and a decoder of either rejects these kinds.
const (
	KindPubBatch byte = 0x03
	KindPubReply byte = 0x04
)

// Publish batch limits checked by the decoders.
const (
	// MaxPubProducer bounds a record's producer id, in bytes (the stream
	// host's record envelope stores at most that many).
	MaxPubProducer = 256
	// MaxPubCopies bounds a reply's Copies and W.
	MaxPubCopies = math.MaxInt32
)

// Result status bytes of a publish reply.
const (
	pubWritten   byte = 0
	pubDuplicate byte = 1
	pubRefused   byte = 2
)

// Minimum encoded sizes of a publish batch's record (producer length and
// data length) and a reply's result (status and offset delta, or status,
// code length and one code byte).
const (
	minPubRecordLen = 2
	minPubResultLen = 2
)

func appendPubBatch(dst []byte, b *PubBatch) []byte {
	size := headerLen + binary.MaxVarintLen64
	for i := range b.Records {
		r := &b.Records[i]
		size += len(r.Producer) + len(r.Data) + 3*binary.MaxVarintLen64
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, Magic, Version, KindPubBatch)
	dst = binary.AppendUvarint(dst, uint64(len(b.Records)))
	for i := range b.Records {
		r := &b.Records[i]
		dst = binary.AppendUvarint(dst, uint64(len(r.Producer)))
		if r.Producer != "" {
			dst = append(dst, r.Producer...)
			dst = binary.AppendUvarint(dst, r.Seq)
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.Data)))
		dst = append(dst, r.Data...)
	}
	return dst
}

func decodePubBatch(p []byte) (*PubBatch, error) {
	d := decoder{p: p}
	if err := d.header(KindPubBatch); err != nil {
		return nil, fmt.Errorf("frame: publish batch: %w", err)
	}
	n, err := d.count("record", minPubRecordLen)
	if err != nil {
		return nil, fmt.Errorf("frame: publish batch: %w", err)
	}
	b := &PubBatch{Records: make([]PubRecord, n)}
	var prev []byte // the previous record's producer bytes
	for i := range b.Records {
		r := &b.Records[i]
		size, err := d.uvarint("producer length")
		if err != nil {
			return nil, fmt.Errorf("frame: publish batch: record %d: %w", i, err)
		}
		if size > MaxPubProducer {
			return nil, fmt.Errorf("frame: publish batch: record %d: producer of %d bytes over the limit %d: %w", i, size, MaxPubProducer, ErrMalformed)
		}
		if size > 0 {
			pb, err := d.bytes(size)
			if err != nil {
				return nil, fmt.Errorf("frame: publish batch: record %d: producer: %w", i, err)
			}
			// Records of one batch mostly share a producer: reuse the
			// previous record's string rather than allocate one each.
			if i > 0 && string(pb) == string(prev) {
				r.Producer = b.Records[i-1].Producer
			} else {
				r.Producer = string(pb)
			}
			prev = pb
			if r.Seq, err = d.uvarint("sequence"); err != nil {
				return nil, fmt.Errorf("frame: publish batch: record %d: %w", i, err)
			}
		} else {
			prev = nil
		}
		size, err = d.uvarint("record length")
		if err != nil {
			return nil, fmt.Errorf("frame: publish batch: record %d: %w", i, err)
		}
		if size > MaxRecordSize {
			return nil, fmt.Errorf("frame: publish batch: record %d: length %d over the limit %d: %w", i, size, MaxRecordSize, ErrMalformed)
		}
		if r.Data, err = d.bytes(size); err != nil {
			return nil, fmt.Errorf("frame: publish batch: record %d: %w", i, err)
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: publish batch: %w", err)
	}
	return b, nil
}

func appendPubReply(dst []byte, r *PubReply) []byte {
	dst = slices.Grow(dst, headerLen+3*binary.MaxVarintLen64+len(r.Results)*3)
	dst = append(dst, Magic, Version, KindPubReply)
	dst = binary.AppendUvarint(dst, uint64(max(r.Copies, 0)))
	dst = binary.AppendUvarint(dst, uint64(max(r.W, 0)))
	dst = binary.AppendUvarint(dst, uint64(len(r.Results)))
	var prev uint64
	for i := range r.Results {
		res := &r.Results[i]
		switch {
		case res.Code != "":
			dst = append(dst, pubRefused)
			dst = binary.AppendUvarint(dst, uint64(len(res.Code)))
			dst = append(dst, res.Code...)
			continue
		case res.Duplicate:
			dst = append(dst, pubDuplicate)
		default:
			dst = append(dst, pubWritten)
		}
		// Offsets of one batch are mostly consecutive: a delta from the
		// previous confirmed result's offset (wrapping, so exact for
		// any pair) takes one byte where an offset takes up to ten.
		dst = binary.AppendVarint(dst, int64(res.Offset-prev))
		prev = res.Offset
	}
	return dst
}

func decodePubReply(p []byte) (*PubReply, error) {
	d := decoder{p: p}
	if err := d.header(KindPubReply); err != nil {
		return nil, fmt.Errorf("frame: publish reply: %w", err)
	}
	r := &PubReply{}
	var err error
	if r.Copies, err = d.smallInt("copies"); err != nil {
		return nil, fmt.Errorf("frame: publish reply: %w", err)
	}
	if r.W, err = d.smallInt("w"); err != nil {
		return nil, fmt.Errorf("frame: publish reply: %w", err)
	}
	n, err := d.count("result", minPubResultLen)
	if err != nil {
		return nil, fmt.Errorf("frame: publish reply: %w", err)
	}
	r.Results = make([]PubResult, n)
	var prev uint64
	for i := range r.Results {
		res := &r.Results[i]
		if d.rest() < 1 {
			return nil, fmt.Errorf("frame: publish reply: result %d: no status byte: %w", i, ErrMalformed)
		}
		status := d.p[d.off]
		d.off++
		switch status {
		case pubRefused:
			if res.Code, err = d.name(); err != nil {
				return nil, fmt.Errorf("frame: publish reply: result %d: code: %w", i, err)
			}
			continue
		case pubDuplicate:
			res.Duplicate = true
		case pubWritten:
		default:
			return nil, fmt.Errorf("frame: publish reply: result %d: status 0x%02x: %w", i, status, ErrMalformed)
		}
		delta, err := d.varint("offset delta")
		if err != nil {
			return nil, fmt.Errorf("frame: publish reply: result %d: %w", i, err)
		}
		res.Offset = prev + uint64(delta)
		prev = res.Offset
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: publish reply: %w", err)
	}
	return r, nil
}

// count reads the entry count of a publish batch or reply: 1 to
// MaxBatchRecords, each entry taking at least minLen of the remaining bytes.
func (d *decoder) count(what string, minLen int) (int, error) {
	n, err := d.uvarint("count")
	if err != nil {
		return 0, fmt.Errorf("%s %w", what, err)
	}
	if n == 0 || n > MaxBatchRecords {
		return 0, fmt.Errorf("%s count %d, want 1 to %d: %w", what, n, MaxBatchRecords, ErrMalformed)
	}
	if n > uint64(d.rest()/minLen) {
		return 0, fmt.Errorf("%s count %d cannot fit in the %d remaining bytes: %w", what, n, d.rest(), ErrMalformed)
	}
	return int(n), nil
}

// smallInt reads a uvarint of at most MaxPubCopies as an int.
func (d *decoder) smallInt(what string) (int, error) {
	v, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v > MaxPubCopies {
		return 0, fmt.Errorf("%s %d over %d: %w", what, v, MaxPubCopies, ErrMalformed)
	}
	return int(v), nil
}
