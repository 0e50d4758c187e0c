package frame

import (
	"encoding/binary"
	"fmt"

	"github.com/brook-streams/brook/pkg/wire"
)

// Host-pair wait frame kinds (schemas/frames.md). They came with version 2
// unchanged, like the publish batch kinds: no existing frame's bytes
// changed, and every other decoder rejects these kinds.
const (
	KindHostWait byte = 0x05
	KindHostWake byte = 0x06
)

// Host-pair wait limits.
const (
	// MaxHostWaitBytes is the largest host wait a stream host sends: the
	// sender registers no more idle copies for one owner host than fit
	// (about 1,600 to 5,000, by the sizes of their numbers); a copy that
	// does not fit keeps its own long poll.
	MaxHostWaitBytes = 64 << 10
	// MaxHostWaitCopies bounds a host wait's and a host wake's count: the
	// most entries of the smallest size MaxHostWaitBytes can hold.
	MaxHostWaitCopies = MaxHostWaitBytes / minHostWaitCopyLen
	// HostWaitHeaderMax is the most a host wait's fields before its
	// entries take (header, node, wait, count).
	HostWaitHeaderMax = headerLen + 1 + wire.MaxNameLen + 2*binary.MaxVarintLen64

	minHostWaitCopyLen = 5 // five one-byte uvarints
)

// HostWaitCopy is one idle follower copy in a host wait: what its next
// replication request would carry.
type HostWaitCopy struct {
	StreamID   uint64
	Epoch      uint64
	RecordTail uint64
	CursorTail uint64
	// KnownHead is the owner's retained head the copy last heard of: the
	// owner wakes it when its head differs, so the copy learns the new head
	// and trims what its owner no longer keeps.
	KnownHead uint64
}

// Size is the encoded size of c in a host wait.
func (c *HostWaitCopy) Size() int {
	return uvarintLen(c.StreamID) + uvarintLen(c.Epoch) + uvarintLen(c.RecordTail) + uvarintLen(c.CursorTail) + uvarintLen(c.KnownHead)
}

// HostWait is a follower host's one long poll of an owner host for all of
// its idle copies there (brook.hostrepl.<owner>.<follower>): the owner
// answers with a HostWake as soon as any of the named streams has more
// than the named tails, a retained head other than the named one, is no
// longer owned there at the named epoch, or
// when the wait ends.
type HostWait struct {
	Node   string // the follower host's node
	WaitMS uint32
	Copies []HostWaitCopy
}

// HostWake is the owner host's answer to a HostWait: the stream ids of the
// named copies that should ask again on their own replication subjects
// (none when the wait ended with nothing).
type HostWake struct {
	StreamIDs []uint64
}

// AppendHostWait appends the encoding of w to dst.
func AppendHostWait(dst []byte, w *HostWait) []byte {
	dst = append(dst, Magic, Version, KindHostWait)
	dst = binary.AppendUvarint(dst, uint64(len(w.Node)))
	dst = append(dst, w.Node...)
	dst = binary.AppendUvarint(dst, uint64(w.WaitMS))
	dst = binary.AppendUvarint(dst, uint64(len(w.Copies)))
	for i := range w.Copies {
		c := &w.Copies[i]
		dst = binary.AppendUvarint(dst, c.StreamID)
		dst = binary.AppendUvarint(dst, c.Epoch)
		dst = binary.AppendUvarint(dst, c.RecordTail)
		dst = binary.AppendUvarint(dst, c.CursorTail)
		dst = binary.AppendUvarint(dst, c.KnownHead)
	}
	return dst
}

// DecodeHostWait decodes a host wait.
func DecodeHostWait(p []byte) (*HostWait, error) {
	d := decoder{p: p}
	if err := d.header(KindHostWait); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	w := &HostWait{}
	var err error
	if w.Node, err = d.name(); err != nil {
		return nil, fmt.Errorf("frame: host wait: node: %w", err)
	}
	if w.WaitMS, err = d.uvarint32("wait ms"); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	n, err := d.hostCount("copy", minHostWaitCopyLen)
	if err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	w.Copies = make([]HostWaitCopy, n)
	for i := range w.Copies {
		c := &w.Copies[i]
		for _, f := range []struct {
			v    *uint64
			what string
		}{{&c.StreamID, "stream id"}, {&c.Epoch, "epoch"}, {&c.RecordTail, "record tail"}, {&c.CursorTail, "cursor tail"}, {&c.KnownHead, "known head"}} {
			if *f.v, err = d.uvarint(f.what); err != nil {
				return nil, fmt.Errorf("frame: host wait: copy %d: %w", i, err)
			}
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	return w, nil
}

// AppendHostWake appends the encoding of w to dst.
func AppendHostWake(dst []byte, w *HostWake) []byte {
	dst = append(dst, Magic, Version, KindHostWake)
	dst = binary.AppendUvarint(dst, uint64(len(w.StreamIDs)))
	for _, id := range w.StreamIDs {
		dst = binary.AppendUvarint(dst, id)
	}
	return dst
}

// DecodeHostWake decodes a host wake.
func DecodeHostWake(p []byte) (*HostWake, error) {
	d := decoder{p: p}
	if err := d.header(KindHostWake); err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	n, err := d.hostCount("stream id", 1)
	if err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	w := &HostWake{}
	if n > 0 {
		w.StreamIDs = make([]uint64, n)
	}
	for i := range w.StreamIDs {
		if w.StreamIDs[i], err = d.uvarint("stream id"); err != nil {
			return nil, fmt.Errorf("frame: host wake: %w", err)
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	return w, nil
}

// hostCount reads the entry count of a host wait or wake: 0 to
// MaxHostWaitCopies, each entry taking at least minLen of the remaining
// bytes.
func (d *decoder) hostCount(what string, minLen int) (int, error) {
	n, err := d.uvarint("count")
	if err != nil {
		return 0, fmt.Errorf("%s %w", what, err)
	}
	if n > MaxHostWaitCopies {
		return 0, fmt.Errorf("%s count %d over the limit %d: %w", what, n, MaxHostWaitCopies, ErrMalformed)
	}
	if n > uint64(d.rest()/minLen) {
		return 0, fmt.Errorf("%s count %d cannot fit in the %d remaining bytes: %w", what, n, d.rest(), ErrMalformed)
	}
	return int(n), nil
}

// uvarintLen is the encoded size of v as a uvarint.
func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
