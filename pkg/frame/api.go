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

// ReplRequest is a follower's fetch on the replication subject: it asks from
// its own durable tails, which tells the owner what it holds.
type ReplRequest struct {
	Node       string
	Epoch      uint64
	StreamID   uint64
	RecordTail uint64
	CursorTail uint64
	WaitMS     uint32
	MaxBytes   uint32
	// TailDigest is the follower's running digest at RecordTail (the
	// chained digest of every record below it). The owner compares it with
	// its own digest there before it counts the request as an ack or
	// serves it: equal digests show the follower's log matches the owner's
	// below its tail.
	TailDigest uint64
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
