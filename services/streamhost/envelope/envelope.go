// Package envelope is the form in which a stream host stores a record: the
// payload as published, behind a small header that carries the producer id
// and sequence of a publish that had them (Brook-Producer, Brook-Seq).
//
// The producer and sequence are stored with the record, not only in the
// owner's memory, so that they travel with replication and a newly promoted
// owner can rebuild its duplicate window from its own log: a publish retried
// across a failover is then answered with its first write's offset instead
// of being written twice.
//
// Layout (all of it is the record data that pkg/streamlog stores, digests
// and replicates unchanged):
//
//	flag byte 0x00 (plain):    0x00, payload
//	flag byte 0x01 (producer): 0x01, uvarint len(producer), producer,
//	                           uvarint seq, payload
//
// Fetch replies strip the envelope and carry the payload only. Encodings
// are canonical (minimal varints, a producer of 1 to MaxProducer bytes), so
// a stored record decodes to exactly one (producer, seq, payload).
package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Flag bytes.
const (
	FlagPlain    byte = 0x00
	FlagProducer byte = 0x01
)

// MaxProducer is the longest producer id, in bytes.
const MaxProducer = 256

// ErrMalformed is wrapped by every decode error.
var ErrMalformed = errors.New("envelope: malformed stored record")

// Record is a decoded stored record.
type Record struct {
	Producer string // "" for a plain record
	Seq      uint64
	Payload  []byte // aliases the stored bytes
}

// Append appends the stored form of payload to dst: plain when producer is
// empty, else with producer and seq. The caller checks the producer's
// length (at most MaxProducer; a longer one would not decode).
func Append(dst []byte, producer string, seq uint64, payload []byte) []byte {
	if producer == "" {
		dst = append(dst, FlagPlain)
		return append(dst, payload...)
	}
	dst = append(dst, FlagProducer)
	dst = binary.AppendUvarint(dst, uint64(len(producer)))
	dst = append(dst, producer...)
	dst = binary.AppendUvarint(dst, seq)
	return append(dst, payload...)
}

// Size is the length of Append's result.
func Size(producer string, seq uint64, payload []byte) int {
	if producer == "" {
		return 1 + len(payload)
	}
	return 1 + uvarintLen(uint64(len(producer))) + len(producer) + uvarintLen(seq) + len(payload)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Decode splits a stored record; Payload aliases stored.
func Decode(stored []byte) (Record, error) {
	producer, seq, payload, err := split(stored)
	if err != nil {
		return Record{}, err
	}
	return Record{Producer: string(producer), Seq: seq, Payload: payload}, nil
}

// Payload returns the payload of a stored record (aliasing it), checked as
// Decode checks it, without copying the producer out: a fetch strips the
// envelope of every record it returns.
func Payload(stored []byte) ([]byte, error) {
	_, _, payload, err := split(stored)
	return payload, err
}

// Producer returns the producer (aliasing stored; nil for a plain record)
// and sequence of a stored record, checked as Decode checks it, without
// copying the producer out: a follower notes every record's producer in
// its duplicate window, which copies a name only the first time it meets
// it.
func Producer(stored []byte) (producer []byte, seq uint64, err error) {
	producer, seq, _, err = split(stored)
	return producer, seq, err
}

// split is Decode with the producer aliasing stored (nil for a plain
// record).
func split(stored []byte) (producer []byte, seq uint64, payload []byte, err error) {
	if len(stored) == 0 {
		return nil, 0, nil, fmt.Errorf("empty record, no flag byte: %w", ErrMalformed)
	}
	switch stored[0] {
	case FlagPlain:
		return nil, 0, stored[1:], nil
	case FlagProducer:
	default:
		return nil, 0, nil, fmt.Errorf("flag byte 0x%02x: %w", stored[0], ErrMalformed)
	}
	p := stored[1:]
	n, err := uvarint(p, "producer length")
	if err != nil {
		return nil, 0, nil, err
	}
	p = p[uvarintLen(n):]
	if n == 0 || n > MaxProducer {
		return nil, 0, nil, fmt.Errorf("producer length %d, want 1 to %d: %w", n, MaxProducer, ErrMalformed)
	}
	if uint64(len(p)) < n {
		return nil, 0, nil, fmt.Errorf("producer of %d bytes, %d left: %w", n, len(p), ErrMalformed)
	}
	producer, p = p[:n], p[n:]
	if seq, err = uvarint(p, "sequence"); err != nil {
		return nil, 0, nil, err
	}
	return producer, seq, p[uvarintLen(seq):], nil
}

// uvarint reads a minimally encoded uvarint from the front of p.
func uvarint(p []byte, what string) (uint64, error) {
	v, n := binary.Uvarint(p)
	switch {
	case n == 0:
		return 0, fmt.Errorf("%s: truncated varint: %w", what, ErrMalformed)
	case n < 0:
		return 0, fmt.Errorf("%s: varint overflows 64 bits: %w", what, ErrMalformed)
	case n > 1 && p[n-1] == 0:
		return 0, fmt.Errorf("%s: non-minimal varint: %w", what, ErrMalformed)
	}
	return v, nil
}
