package wire

import "unicode/utf8"

// Heartbeat is what a stream host publishes on HeartbeatSubject every
// interval. Heartbeats are not written to the Raft log: coordinators and the
// attention service keep them in memory.
type Heartbeat struct {
	Node string `json:"node"`
	// Incarnation changes on every start of the host process, so a restart
	// is told from a pause.
	Incarnation uint64 `json:"incarnation"`
	// Leaving is set by a host that is shutting down gracefully, so its
	// streams fail over at once.
	Leaving bool `json:"leaving,omitempty"`
	// StoreError is set, with Leaving, by a host whose store failed (a
	// write or sync error): it holds nothing it can confirm or serve, so
	// its streams fail over as from a leaving host, and it goes on beating
	// to say why. At most MaxStoreErrorLen bytes.
	StoreError string       `json:"store_error,omitempty"`
	Copies     []CopyStatus `json:"copies"`
	AtMS       int64        `json:"at_ms"`
	// Beat numbers the host's beats within an incarnation. A beat whose
	// copies do not fit in one message is sent as Parts messages (Part 0
	// to Parts-1), each with a share of the copies; 0 or 1 parts means the
	// message is the whole beat (see package heartbeat).
	Beat  uint64 `json:"beat,omitempty"`
	Part  int    `json:"part,omitempty"`
	Parts int    `json:"parts,omitempty"`
	// ConnServer and ConnID name the host's main NATS connection (the
	// beats may travel on one of their own): the id of the server it is
	// connected to and the client id that server gave it. A disconnect advisory names the connection it is
	// about the same way, so a coordinator can tell an advisory about an
	// older connection (processed after the host reconnected) from one
	// about the connection the host beats on. Empty and 0 when unknown.
	ConnServer string `json:"conn_server,omitempty"`
	ConnID     uint64 `json:"conn_id,omitempty"`
	// Live marks a liveness beat: a small proof of life a host sends more
	// often than its full heartbeat, so a lost host is noticed sooner
	// without every copy being reported more often. It has the fields
	// above but no copies; its empty Copies say nothing of what the host
	// holds (readers keep the copies of the last full beat). It shares
	// the full beats' numbering (Beat) and is never split.
	Live bool `json:"live,omitempty"`
	// Delta marks a report of what changed: Copies are only the copies
	// whose fields changed (or that are new, or Gone) since the report
	// numbered Since, the host's previous report (full or delta) of this
	// incarnation. A report without Delta is full: every copy the host
	// holds. A reader applies a delta only onto the report numbered Since;
	// one that missed a report (a gap) or started after it waits for the
	// next full report, which the host sends at least every
	// DefaultFullReportInterval (see package heartbeat).
	Delta bool   `json:"delta,omitempty"`
	Since uint64 `json:"since,omitempty"`
}

// MaxStoreErrorLen bounds Heartbeat.StoreError, in bytes; CutStoreError
// cuts a longer error text.
const MaxStoreErrorLen = 256

// CutStoreError returns msg cut to at most MaxStoreErrorLen bytes, on a
// UTF-8 character boundary.
func CutStoreError(msg string) string {
	if len(msg) <= MaxStoreErrorLen {
		return msg
	}
	cut := MaxStoreErrorLen
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// CopyStatus is one copy's state in a heartbeat.
type CopyStatus struct {
	Stream     string `json:"stream"`
	StreamID   uint64 `json:"stream_id"`
	Role       string `json:"role"`
	Epoch      uint64 `json:"epoch"`
	RecordTail uint64 `json:"record_tail"`
	CursorTail uint64 `json:"cursor_tail"`
	// Confirmed is the owner's confirmed watermark (owners only).
	Confirmed uint64 `json:"confirmed,omitempty"`
	Sealed    bool   `json:"sealed"`
	// Gone, in a delta report, says the host no longer holds the copy
	// (Role is then none, the other fields but Stream and StreamID zero).
	Gone bool `json:"gone,omitempty"`
}

// AssignNotice is published on AssignNoticeSubject after a committed change;
// a host that sees a version newer than the one it applied pulls.
type AssignNotice struct {
	Version uint64 `json:"version"`
	// Recovery marks the notice of a recovery's commit (a failover, a
	// planned move): the host pulls at once, not after the gap it keeps
	// between the pulls that bursts of other notices ask for.
	Recovery bool `json:"recovery,omitempty"`
	// FullReport asks the host for a full report in its next heartbeat: a
	// coordinator got a delta it has no base for (it started after the
	// host's last full report, or missed a report). Version is then 0.
	FullReport bool `json:"full_report,omitempty"`
	// Assigned, on a recovery's notice, is the committed assignment of its
	// stream: a host holding a copy of it at an older epoch applies it at
	// once, before its pull, so the new owner serves one pull sooner. On
	// a create's notice (Recovery unset) it is the new stream's
	// assignment, which a host that has not applied the version yet
	// applies in its pull loop without pulling first.
	Assigned *AssignedStream `json:"assigned,omitempty"`
}

// OwnerNotice is published on OwnerNoticeSubject by a host that has just
// become the owner of a stream, once it takes publishes.
type OwnerNotice struct {
	Stream   string `json:"stream"`
	StreamID uint64 `json:"stream_id"`
	Epoch    uint64 `json:"epoch"`
	Node     string `json:"node"`
}

// AssignmentPull asks for one page of the snapshot of assignments that
// concern Node: the streams whose names sort after After (all when empty),
// at most Limit of them (MaxAssignmentPage when 0 or more). A host pulls
// the pages in turn, each reply's Next as the next After, until Next is
// empty; so no reply grows with the cluster.
//
// Since, when set, asks instead for the streams changed since that version
// (the version the host applied last): the reply (Since set) holds those
// streams only, and NextSince, when more follow, is the next pull's Since.
// A coordinator that cannot answer from that version (too old, or unknown
// to it) answers with the first page of a full pull (Since 0 in the reply).
type AssignmentPull struct {
	Node  string `json:"node"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
	Since uint64 `json:"since,omitempty"`
}

// MaxAssignmentPage is the most streams one page of an assignment pull
// covers (and the default): a page of assigned streams of 3 copies, long
// names and a few history starts stays well under NATS' 1 MiB default
// payload limit.
const MaxAssignmentPage = 1000

// AssignmentSnapshot is everything a host needs to bring its copies in line,
// for the streams of one page (a range of names, from after the pull's
// After up to and including Next, or to the last stream when Next is empty):
// the assignments that include the node, each with its stream's history
// starts, and the ids of every stream of the range that exists, so a copy of
// a deleted stream can be dropped while a copy left out of a live stream
// stays sealed. Each page is read from one version of the state; the pages
// of one pull may come from different versions (each stream's assignment is
// applied under its own epoch guards).
type AssignmentSnapshot struct {
	Version     uint64            `json:"version"`
	Node        string            `json:"node"`
	Assignments []AssignedStream  `json:"assignments"`
	Streams     map[string]uint64 `json:"streams"` // name -> stream id of every existing stream of the page's range
	// Next is the name of the last stream of the page when more follow
	// (the next pull's After); empty on the last page.
	Next string `json:"next,omitempty"`
	// Since is set in the reply to a pull of changes (AssignmentPull.Since):
	// the page then covers the streams changed after Since instead of a
	// range of names (Assignments and Streams hold those of them that
	// include the node and that exist), Deleted names those that no longer
	// exist, and NextSince, when more follow, is the version through which
	// the page covers the changes (the next pull's Since).
	Since     uint64   `json:"since,omitempty"`
	Deleted   []string `json:"deleted,omitempty"`
	NextSince uint64   `json:"next_since,omitempty"`
}

// AssignedStream is one assignment with its stream's history starts and
// retention. Starts may be empty but is never absent from a valid snapshot.
type AssignedStream struct {
	Assignment Assignment     `json:"assignment"`
	Starts     []HistoryStart `json:"starts"`
	Retention  Retention      `json:"retention"`
	// MinCopies is the stream's floor (0: none): while the assignment
	// holds fewer copies, the owner refuses publishes (BelowFloor).
	MinCopies int `json:"min_copies,omitempty"`
	// TraceParent links a host's apply to the failover trace that made it
	// (W3C traceparent of the guarded commit's span).
	TraceParent string `json:"traceparent,omitempty"`
}

// SealRequest fences one copy at FenceEpoch for recovery Transition.
type SealRequest struct {
	Stream     string `json:"stream"`
	StreamID   uint64 `json:"stream_id"`
	FenceEpoch uint64 `json:"fence_epoch"`
	Transition uint64 `json:"transition"`
	// TraceParent carries the W3C trace context of the seal span.
	TraceParent string `json:"traceparent,omitempty"`
}

// SealReply reports the sealed copy's tails, log epochs and digest, all read
// from metadata without scanning the log.
type SealReply struct {
	Node       string     `json:"node"`
	Stream     string     `json:"stream"`
	FenceEpoch uint64     `json:"fence_epoch"`
	Transition uint64     `json:"transition"`
	RecordHead uint64     `json:"record_head"`
	RecordTail uint64     `json:"record_tail"`
	CursorTail uint64     `json:"cursor_tail"`
	LogEpochs  []LogEpoch `json:"log_epochs"`
	Digest     string     `json:"digest"` // hex of the running digest at RecordTail
	// Confirmed is set only by a copy that was the owner at the epoch
	// before FenceEpoch when the seal stopped it: an upper bound of every
	// offset it (or an earlier role of this copy at that epoch) confirmed,
	// final because the role stopped before the reply. Zero: unknown.
	Confirmed uint64 `json:"confirmed,omitempty"`
}

// MaxSealBatch is the most seals one SealBatch may hold; a host answers a
// larger batch bad_request.
const MaxSealBatch = 1024

// SealBatch asks a host for several seals at once, each as SealRequest
// asks it (brook.host.<node>.seals).
type SealBatch struct {
	Seals []SealRequest `json:"seals"`
	// TimeoutMs, when set, is how long the host may take to answer: a
	// seal still running then is answered timeout in the reply (it may
	// still complete later; a seal is idempotent at its fence), so one
	// slow seal does not hold its batch-mates' answers past their
	// callers' deadlines. Unset, the host answers once every seal ended.
	TimeoutMs uint64 `json:"timeout_ms,omitempty"`
}

// SealBatchReply answers a SealBatch: one result per seal, in the
// batch's order. A batch refused as a whole (malformed, too large, the
// host stopping) is answered with an ErrorReply instead.
type SealBatchReply struct {
	Replies []SealResult `json:"replies"`
}

// SealResult is one seal's answer in a SealBatchReply: exactly one of
// Reply and Error is set.
type SealResult struct {
	Reply *SealReply `json:"reply,omitempty"`
	Error *Error     `json:"error,omitempty"`
}

// CursorCommit asks the owner to record that cursor has consumed everything
// below Offset.
type CursorCommit struct {
	Cursor string `json:"cursor"`
	Offset uint64 `json:"offset"`
}

// CursorCommitReply confirms a commit was written (not yet fsynced).
type CursorCommitReply struct {
	Cursor      string `json:"cursor"`
	Offset      uint64 `json:"offset"`
	EventOffset uint64 `json:"event_offset"`
}

// FetchRequest asks the owner for records at or below its confirmed
// watermark. The position is, in order: Start "offset" with Offset (a
// consumer that tracks its own position after a first fetch), Start
// "earliest" or "latest", or the committed position of the named durable
// Cursor (a new name starts at the retained head). A request naming neither
// Cursor nor Start is a bad request.
type FetchRequest struct {
	Cursor     string `json:"cursor,omitempty"`
	Start      string `json:"start,omitempty"`
	Offset     uint64 `json:"offset,omitempty"`
	MaxRecords int    `json:"max_records,omitempty"`
	MaxBytes   int    `json:"max_bytes,omitempty"`
	WaitMS     int64  `json:"wait_ms,omitempty"`
}

// PublishConfirm is the reply to a confirmed publish: the record is at
// Offset, written at Epoch, and Copies copies held it durably when it was
// confirmed (at least W).
type PublishConfirm struct {
	// StreamID is the id of the stream the record was written to: a
	// stream deleted and created again under the same name has a new id.
	StreamID uint64 `json:"stream_id"`
	Offset   uint64 `json:"offset"`
	Epoch    uint64 `json:"epoch"`
	Copies   int    `json:"copies"`
	// W is the confirm rule the record was confirmed under: W of the
	// assignment at Epoch (policy.StampW of its stamp and copy count).
	// After a failover leaves fewer copies than the stream's E, W can be
	// lower than the stream was created with, until placement adds a copy.
	W int `json:"w"`
	// Duplicate is set when a producer id and sequence had already been
	// written; Offset is then the first write's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Headers a publisher may set on a publish: a producer id and sequence for
// duplicate suppression, and the id of the stream it means. An owner of
// another stream of that name refuses the publish: not_found when the id
// named is older than its own (the stream meant was deleted), not_owner
// when it is newer (this owner has not yet learnt that its stream was
// deleted and created again; it answers only after a delay, so that the
// new owner, which gets the same request, answers first if it serves
// already, and the client retries otherwise). Without the header a publish
// goes to whichever stream holds the name.
const (
	HeaderProducer = "Brook-Producer"
	HeaderSequence = "Brook-Seq"
	HeaderStreamID = "Brook-Stream-Id"
	// HeaderServingFor, on a fetch reply, is how many milliseconds the
	// answering owner has been serving on its current NATS connection
	// (since it took the role, or since its last reconnect if later). A
	// client whose request was sent before that cannot have reached this
	// owner (see pkg/client's owner watch).
	HeaderServingFor = "Brook-Serving-For-Ms"
	// HeaderEpoch, on a publish batch's frame.PubReply, is the epoch of
	// the owner that confirmed it (a single publish's confirm carries it
	// in its JSON); the reply also carries HeaderStreamID.
	HeaderEpoch = "Brook-Epoch"
)
