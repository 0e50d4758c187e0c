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
	// KindHostWakeRecords is a host wake that carries records for some
	// of the copies it names (HostWake.Batches). A wake without them is
	// written as KindHostWake, byte for byte the frame before records
	// came; a follower host whose decoder knows only that kind fails
	// this one, and so wakes every copy it named, which then ask on
	// their own as before.
	KindHostWakeRecords byte = 0x07
	// KindHostWaitChange is a host wait that names only what changed in
	// its sender's idle set since its host wait of generation Base
	// (HostWaitChange). A sender sends one only to an owner host whose
	// last answer carried HeaderHostWaitGen: an owner host of a release
	// before this kind never did, and its decoder would refuse the kind.
	KindHostWaitChange byte = 0x08
)

// HeaderHostWaitGen on a full host wait (KindHostWait) is the generation
// its sender gives that set; on an owner host's answer to a host wait of
// either kind, the generation of the sender's set the owner host holds
// after it, which the sender's next change may be based on. An answer
// without it (an owner host of an earlier release, or a change based on
// a generation the owner host does not hold) has the sender send its
// whole set next.
const HeaderHostWaitGen = "Brook-Host-Wait-Gen"

// HeaderWakeRecords on a host wait says its sender decodes host wakes
// with records (KindHostWakeRecords): an owner host carries records only
// to a host wait that has it, so that a follower host of a release
// before them is answered with stream ids only, as it expects.
const HeaderWakeRecords = "Brook-Wake-Records"

// HeaderLinkHello marks a message on a host-wait subject as a direct
// link's hello rather than a host wait: the sending host offers its link
// certificate and asks for the owner host's address and certificate
// (the stream host's link_direct.go). It travels on the subject only the
// sender may publish, which is what binds the certificate to its node.
const HeaderLinkHello = "Brook-Link-Hello"

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

// HostWaitChange is a host wait that names only the copies that joined or
// changed in the sender's idle set (Copies) and the stream ids of those
// that left it (Left) since its host wait of generation Base, whose set
// the owner host holds (HeaderHostWaitGen); with them the set is that of
// generation Gen. Everything else is HostWait's: the owner host answers
// this change as it would the whole set.
type HostWaitChange struct {
	Node      string
	WaitMS    uint32
	Base, Gen uint64
	Left      []uint64
	Copies    []HostWaitCopy
}

// HostWake is the owner host's answer to a HostWait: the stream ids of the
// named copies that should ask again on their own replication subjects
// (none when the wait ended with nothing), and the records of others.
type HostWake struct {
	StreamIDs []uint64
	// Batches carry, for copies the owner host proved on its history at
	// the tails they named (their last ack it counted), the records past
	// those tails: what the copy's own request would have brought. A copy
	// applies them as that request's reply and acks them as usual.
	Batches []HostWakeBatch
}

// HostWakeBatch is one copy's records in a host wake.
type HostWakeBatch struct {
	StreamID uint64
	Batch    *Batch
}

// minHostWakeBatchLen is the least a host wake's batch entry takes: its
// stream id and length, and a batch's header and six one-byte numbers
// (its head digest is eight bytes).
const minHostWakeBatchLen = 2 + headerLen + 5 + 8 + 2

// AppendHostWait appends the encoding of w to dst.
func AppendHostWait(dst []byte, w *HostWait) []byte {
	dst = append(dst, Magic, Version, KindHostWait)
	dst = binary.AppendUvarint(dst, uint64(len(w.Node)))
	dst = append(dst, w.Node...)
	dst = binary.AppendUvarint(dst, uint64(w.WaitMS))
	return appendHostWaitCopies(dst, w.Copies)
}

// appendHostWaitCopies appends a copy count and the copies.
func appendHostWaitCopies(dst []byte, copies []HostWaitCopy) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(copies)))
	for i := range copies {
		c := &copies[i]
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
	if w.Node, w.WaitMS, err = d.hostWaitStart(); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	if w.Copies, err = d.hostWaitCopies(); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: host wait: %w", err)
	}
	return w, nil
}

// AppendHostWaitChange appends the encoding of w to dst.
func AppendHostWaitChange(dst []byte, w *HostWaitChange) []byte {
	dst = append(dst, Magic, Version, KindHostWaitChange)
	dst = binary.AppendUvarint(dst, uint64(len(w.Node)))
	dst = append(dst, w.Node...)
	dst = binary.AppendUvarint(dst, uint64(w.WaitMS))
	dst = binary.AppendUvarint(dst, w.Base)
	dst = binary.AppendUvarint(dst, w.Gen)
	dst = appendStreamIDs(dst, w.Left)
	return appendHostWaitCopies(dst, w.Copies)
}

// appendStreamIDs appends a count and the stream ids.
func appendStreamIDs(dst []byte, ids []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, id)
	}
	return dst
}

// streamIDs reads a count and that many stream ids (what names them in
// errors).
func (d *decoder) streamIDs(what string) ([]uint64, error) {
	n, err := d.hostCount(what, 1)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, n)
	for i := range ids {
		if ids[i], err = d.uvarint(what); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// DecodeHostWaitChange decodes a host wait change.
func DecodeHostWaitChange(p []byte) (*HostWaitChange, error) {
	d := decoder{p: p}
	if err := d.header(KindHostWaitChange); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	w := &HostWaitChange{}
	var err error
	if w.Node, w.WaitMS, err = d.hostWaitStart(); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	if w.Base, err = d.uvarint("base generation"); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	if w.Gen, err = d.uvarint("generation"); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	if w.Left, err = d.streamIDs("left stream id"); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	if w.Copies, err = d.hostWaitCopies(); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: host wait change: %w", err)
	}
	return w, nil
}

// IsHostWaitChange reports whether p is a host wait change by its kind,
// for a subject that takes both kinds of host wait (it checks nothing
// else: the decoder does).
func IsHostWaitChange(p []byte) bool { return len(p) >= headerLen && p[2] == KindHostWaitChange }

// hostWaitStart reads a host wait's node and wait.
func (d *decoder) hostWaitStart() (node string, waitMS uint32, err error) {
	if node, err = d.name(); err != nil {
		return "", 0, fmt.Errorf("node: %w", err)
	}
	if waitMS, err = d.uvarint32("wait ms"); err != nil {
		return "", 0, err
	}
	return node, waitMS, nil
}

// hostWaitCopies reads a copy count and the copies.
func (d *decoder) hostWaitCopies() ([]HostWaitCopy, error) {
	n, err := d.hostCount("copy", minHostWaitCopyLen)
	if err != nil {
		return nil, err
	}
	copies := make([]HostWaitCopy, n)
	for i := range copies {
		c := &copies[i]
		for _, f := range []struct {
			v    *uint64
			what string
		}{{&c.StreamID, "stream id"}, {&c.Epoch, "epoch"}, {&c.RecordTail, "record tail"}, {&c.CursorTail, "cursor tail"}, {&c.KnownHead, "known head"}} {
			if *f.v, err = d.uvarint(f.what); err != nil {
				return nil, fmt.Errorf("copy %d: %w", i, err)
			}
		}
	}
	return copies, nil
}

// AppendHostWake appends the encoding of w to dst: kind KindHostWake
// without batches, KindHostWakeRecords with them.
func AppendHostWake(dst []byte, w *HostWake) []byte {
	kind := KindHostWake
	if len(w.Batches) > 0 {
		kind = KindHostWakeRecords
	}
	dst = append(dst, Magic, Version, kind)
	dst = appendStreamIDs(dst, w.StreamIDs)
	if len(w.Batches) == 0 {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(w.Batches)))
	var b []byte
	for _, e := range w.Batches {
		b = AppendBatch(b[:0], e.Batch)
		dst = binary.AppendUvarint(dst, e.StreamID)
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	}
	return dst
}

// DecodeHostWake decodes a host wake.
func DecodeHostWake(p []byte) (*HostWake, error) {
	d := decoder{p: p}
	records := len(p) >= headerLen && p[2] == KindHostWakeRecords
	kind := KindHostWake
	if records {
		kind = KindHostWakeRecords
	}
	if err := d.header(kind); err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	ids, err := d.streamIDs("stream id")
	if err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	w := &HostWake{}
	if len(ids) > 0 {
		w.StreamIDs = ids
	}
	if records {
		if err := d.hostWakeBatches(w); err != nil {
			return nil, fmt.Errorf("frame: host wake: %w", err)
		}
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("frame: host wake: %w", err)
	}
	return w, nil
}

// hostWakeBatches reads a KindHostWakeRecords frame's batches: at least
// one (a wake without any is written as KindHostWake, so that every wake
// has one encoding), each a stream id and a length-prefixed batch frame.
func (d *decoder) hostWakeBatches(w *HostWake) error {
	m, err := d.hostCount("batch", minHostWakeBatchLen)
	if err != nil {
		return err
	}
	if m == 0 {
		return fmt.Errorf("no batch in a host wake with records: %w", ErrMalformed)
	}
	w.Batches = make([]HostWakeBatch, m)
	for i := range w.Batches {
		e := &w.Batches[i]
		if e.StreamID, err = d.uvarint("batch stream id"); err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		size, err := d.uvarint("batch length")
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		p, err := d.bytes(size)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		if e.Batch, err = DecodeBatch(p); err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
	}
	return nil
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
