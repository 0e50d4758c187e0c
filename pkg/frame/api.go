// Package frame is brook's binary data-plane encoding: fetch replies and
// replication requests and batches. The layout is specified in
// schemas/frames.md. Decoders never panic: a bad frame is an error.
//
// THIS FILE IS THE API CONTRACT other packages build against.
package frame

// Record is one record in a batch.
type Record struct {
	Offset uint64
	TimeNS int64
	Data   []byte
}

// CursorEvent is one cursor event in a batch.
type CursorEvent struct {
	Offset   uint64
	Cursor   string
	Position uint64
}

// Batch is a reply to a fetch (records only) or a replication request
// (records and cursor events). Records are contiguous from Records[0].Offset;
// cursor events likewise.
type Batch struct {
	Epoch uint64 // the owner's epoch
	Head  uint64 // the owner's retained head
	// HeadDigest is the owner's running digest at Head. A follower reset
	// to Head starts its digest chain from it, so that its tail digest
	// keeps matching the owner's (see ReplRequest.TailDigest).
	HeadDigest uint64
	Tail       uint64 // the owner's record tail
	Confirmed  uint64 // the owner's confirmed watermark
	// Next is the offset the next fetch should ask from.
	Next         uint64
	Records      []Record
	CursorEvents []CursorEvent
}

// ReplRequest is a follower's fetch on the replication subject. Its durable
// tails (RecordTail, CursorTail, TailDigest) tell the owner what the
// follower holds durably: the request is the follower's ack of everything
// below them. It asks for records from its read position (ReadFrom), which
// may be past its durable record tail: a follower writes the next batch
// while the previous one's fsync runs, and asks from its written tail.
type ReplRequest struct {
	Node       string
	Epoch      uint64
	StreamID   uint64
	RecordTail uint64 // durable record tail: what the owner may count
	CursorTail uint64 // durable cursor event tail
	WaitMS     uint32
	MaxBytes   uint32
	// TailDigest is the follower's running digest at RecordTail (the
	// chained digest of every record below it). The owner compares it with
	// its own digest there before it counts the request as an ack or
	// serves it: equal digests show the follower's log matches the owner's
	// below its tail.
	TailDigest uint64
	// ReadFrom, when past RecordTail, is where the owner sends records
	// from: the follower's written record tail, records applied but maybe
	// not yet durable. ReadDigest is the follower's running digest there,
	// which the owner checks like TailDigest before it serves the request.
	// A ReadFrom at or below RecordTail (0 included) means RecordTail, and
	// is not encoded (ReadPosition).
	ReadFrom   uint64
	ReadDigest uint64
}

// ReadPosition is where the owner sends records from and the follower's
// digest there: ReadFrom and ReadDigest when ReadFrom is past RecordTail,
// else RecordTail and TailDigest.
func (r *ReplRequest) ReadPosition() (from, digest uint64) {
	if r.ReadFrom > r.RecordTail {
		return r.ReadFrom, r.ReadDigest
	}
	return r.RecordTail, r.TailDigest
}

// AppendBatch appends the encoding of b to dst.
func AppendBatch(dst []byte, b *Batch) []byte { return appendBatch(dst, b) }

// DecodeBatch decodes a batch; Data slices alias p.
func DecodeBatch(p []byte) (*Batch, error) { return decodeBatch(p) }

// AppendReplRequest appends the encoding of r to dst.
func AppendReplRequest(dst []byte, r *ReplRequest) []byte { return appendReplRequest(dst, r) }

// DecodeReplRequest decodes a replication request.
func DecodeReplRequest(p []byte) (*ReplRequest, error) { return decodeReplRequest(p) }

// Error replies on data-plane subjects carry header HeaderError with the
// code and a JSON wire.ErrorReply body.
const HeaderError = "Brook-Error"

// PubRecord is one record of a publish batch. Producer "" means the record
// has no producer id (and Seq is not sent); otherwise the owner suppresses a
// repeat of (Producer, Seq) as it does for a single publish's
// Brook-Producer/Brook-Seq headers.
type PubRecord struct {
	Producer string
	Seq      uint64
	Data     []byte
}

// PubBatch is a client's publish batch, sent on brook.s.<stream>.pubb: one
// NATS request carrying many records, written in one group commit and
// answered with one PubReply.
type PubBatch struct {
	Records []PubRecord
}

// PubResult is the outcome of one record of a publish batch. Code != ""
// means this record was refused with that wire error code (Offset is then
// 0 and Duplicate false); otherwise the record is confirmed at Offset, and
// Duplicate says it was a repeat of an earlier write of its producer
// sequence, which holds Offset.
type PubResult struct {
	Offset    uint64
	Duplicate bool
	Code      string
}

// PubReply is the owner's reply to a publish batch once every record of it
// is confirmed (or refused): Results[i] is the outcome of Records[i].
// Copies is how many copies held the batch's highest offset when the reply
// was built, W the copies the stream's policy needed.
type PubReply struct {
	Copies, W int
	Results   []PubResult
}

// AppendPubBatch appends the encoding of b to dst.
func AppendPubBatch(dst []byte, b *PubBatch) []byte { return appendPubBatch(dst, b) }

// DecodePubBatch decodes a publish batch; Data slices alias p.
func DecodePubBatch(p []byte) (*PubBatch, error) { return decodePubBatch(p) }

// AppendPubReply appends the encoding of r to dst.
func AppendPubReply(dst []byte, r *PubReply) []byte { return appendPubReply(dst, r) }

// DecodePubReply decodes a publish batch reply.
func DecodePubReply(p []byte) (*PubReply, error) { return decodePubReply(p) }
