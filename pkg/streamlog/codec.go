package streamlog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

// recordHeaderLen is the fixed part of a record value: the running digest
// and the running byte count after the record, and the owner's timestamp.
const recordHeaderLen = 24

// recordMeta is the fixed part of a stored record.
type recordMeta struct {
	digest uint64 // running digest after this record
	cum    uint64 // data bytes of every record from the copy's origin up to and including this one
	timeNS int64
}

func putRecordValue(dst []byte, m recordMeta, data []byte) {
	putChain(dst, m.digest, m.cum)
	binary.BigEndian.PutUint64(dst[16:24], uint64(m.timeNS))
	copy(dst[recordHeaderLen:], data)
}

// putChain sets a stored record's running digest and byte count (the
// rest of its header and its data are already in place).
func putChain(dst []byte, digest, cum uint64) {
	binary.BigEndian.PutUint64(dst[0:8], digest)
	binary.BigEndian.PutUint64(dst[8:16], cum)
}

// decodeRecordValue splits a stored record; data aliases v.
func decodeRecordValue(v []byte) (recordMeta, []byte, error) {
	if len(v) < recordHeaderLen {
		return recordMeta{}, nil, fmt.Errorf("streamlog: record value has %d bytes, less than its %d byte header", len(v), recordHeaderLen)
	}
	return recordMeta{
		digest: binary.BigEndian.Uint64(v[0:8]),
		cum:    binary.BigEndian.Uint64(v[8:16]),
		timeNS: int64(binary.BigEndian.Uint64(v[16:24])),
	}, v[recordHeaderLen:], nil
}

// chainDigest is one step of the running digest: d' = xxhash64(d || offset
// || data), all integers big-endian. Owner and follower compute the same
// chain over the same records at the same offsets, so equal digests at a
// tail mean (with high probability) equal logs below it. The timestamp is
// deliberately not hashed: it is metadata of the owner's append, and the
// overlap rule of Apply compares data only.
func chainDigest(prev, off uint64, data []byte) uint64 {
	var hdr [16]byte
	binary.BigEndian.PutUint64(hdr[0:8], prev)
	binary.BigEndian.PutUint64(hdr[8:16], off)
	var h xxhash.Digest
	h.Reset()
	_, _ = h.Write(hdr[:])
	_, _ = h.Write(data)
	return h.Sum64()
}

func formatDigest(d uint64) string { return fmt.Sprintf("%016x", d) }

// Cursor event values: position (8 bytes) then the cursor name.
func encodeEvent(cursor string, pos uint64) []byte {
	v := make([]byte, 8, 8+len(cursor))
	binary.BigEndian.PutUint64(v, pos)
	return append(v, cursor...)
}

func decodeEvent(v []byte) (cursor string, pos uint64, err error) {
	if len(v) < 8 {
		return "", 0, fmt.Errorf("streamlog: cursor event value has %d bytes, less than 8", len(v))
	}
	return string(v[8:]), binary.BigEndian.Uint64(v[:8]), nil
}

// snapshot is a fold of the cursor events below boundary (plus, after a
// cut lowered the boundary, of events that were removed above it).
type snapshot struct {
	boundary uint64
	state    map[string]uint64
}

// Snapshot values: boundary (8), count (4), then per cursor in name order:
// name length (2), name, position (8).
func encodeSnapshot(boundary uint64, state map[string]uint64) []byte {
	v := make([]byte, 12, 12+len(state)*24)
	binary.BigEndian.PutUint64(v[0:8], boundary)
	binary.BigEndian.PutUint32(v[8:12], uint32(len(state)))
	for _, name := range slices.Sorted(maps.Keys(state)) {
		v = binary.BigEndian.AppendUint16(v, uint16(len(name)))
		v = append(v, name...)
		v = binary.BigEndian.AppendUint64(v, state[name])
	}
	return v
}

func decodeSnapshot(v []byte) (snapshot, error) {
	bad := func(what string) (snapshot, error) {
		return snapshot{}, fmt.Errorf("streamlog: cursor snapshot is corrupt: %s", what)
	}
	if len(v) < 12 {
		return bad("short header")
	}
	s := snapshot{boundary: binary.BigEndian.Uint64(v[0:8])}
	n := binary.BigEndian.Uint32(v[8:12])
	s.state = make(map[string]uint64, n)
	p := v[12:]
	for range n {
		if len(p) < 2 {
			return bad("short name length")
		}
		l := int(binary.BigEndian.Uint16(p))
		p = p[2:]
		if len(p) < l+8 {
			return bad("short entry")
		}
		s.state[string(p[:l])] = binary.BigEndian.Uint64(p[l : l+8])
		p = p[l+8:]
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return s, nil
}

// meta is a copy's persisted metadata. It is small and changes rarely (on
// create, seal, epoch, cut, retention and reset), so it is stored whole as
// JSON under the copy's meta key.
type meta struct {
	Stream    string          `json:"stream"`
	StreamID  uint64          `json:"stream_id"`
	Retention wire.Retention  `json:"retention"`
	LogEpochs []wire.LogEpoch `json:"log_epochs"`
	Sealed    bool            `json:"sealed"`
	Seal      Seal            `json:"seal"`
	// Head is the retained record head; HeadDigest and HeadCum are the
	// running digest and byte count at it, so the digest at the head is
	// known after the records below it are gone.
	Head       uint64 `json:"head"`
	HeadDigest uint64 `json:"head_digest"`
	HeadCum    uint64 `json:"head_cum"`
	// CursorStart is the lowest cursor event offset the copy can hold: 0,
	// or where ResetTo restarted the cursor event log.
	CursorStart uint64 `json:"cursor_start"`
}

func (m meta) clone() meta {
	m.LogEpochs = slices.Clone(m.LogEpochs)
	m.Seal.Replaced = slices.Clone(m.Seal.Replaced)
	return m
}

func encodeMeta(m meta) []byte {
	v, err := json.Marshal(m)
	if err != nil {
		// meta holds only integers, strings and slices of them.
		panic(fmt.Sprintf("streamlog: encoding meta: %v", err))
	}
	return v
}

func decodeMeta(v []byte) (meta, error) {
	var m meta
	if err := json.Unmarshal(v, &m); err != nil {
		return meta{}, fmt.Errorf("streamlog: decoding copy meta: %w", err)
	}
	return m, nil
}
