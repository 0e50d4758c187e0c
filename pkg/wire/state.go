package wire

import "github.com/brook-streams/brook/pkg/policy"

// Node liveness states, as the coordinator's replicated state holds them.
const (
	NodeLive     = "live"
	NodeExpired  = "expired"
	NodeDraining = "draining"
	NodeLeft     = "left"
)

// Copy roles, as a host reports them in its heartbeat.
const (
	RoleOwner    = "owner"
	RoleFollower = "follower"
	RoleNone     = "none" // held but in no current assignment (e.g. left out, sealed)
)

// Assignment says which node owns a stream and which follow it, at which
// epoch, under which confirm policy. Owner + Followers are the E copies.
type Assignment struct {
	Stream string `json:"stream"`
	// StreamID tells a stream from an earlier one of the same name: a host
	// that holds a copy with another id deletes it and starts afresh.
	StreamID  uint64   `json:"stream_id"`
	Epoch     uint64   `json:"epoch"`
	Owner     string   `json:"owner"`
	Followers []string `json:"followers"`
	// Policy is the confirm policy stamp (see package policy). Empty reads
	// as local_durable: every copy.
	Policy string `json:"policy"`
}

// Copies returns the owner followed by the followers.
func (a Assignment) Copies() []string {
	return append([]string{a.Owner}, a.Followers...)
}

// Includes reports whether node holds a copy under a.
func (a Assignment) Includes(node string) bool {
	if a.Owner == node {
		return true
	}
	for _, f := range a.Followers {
		if f == node {
			return true
		}
	}
	return false
}

// UnderReplication is how a stream stands while its assignment holds fewer
// copies than the stream's E (after a failover left a copy out, until
// placement adds one back). stream.info shows it, the attention service
// lists it (kind under_replicated) and the coordinator counts it, all from
// Assignment.UnderReplicated, so the three cannot disagree.
type UnderReplication struct {
	// Copies is how many copies the assignment holds now (fewer than E).
	Copies int `json:"copies"`
	// W is the confirm rule now: policy.StampW of the assignment's stamp
	// and Copies, which is what the owner confirms by.
	W int `json:"w"`
	// SinceMS is when the assignment fell below E.
	SinceMS int64 `json:"since_ms"`
	// LossLosesConfirmed says one more loss would lose confirmed records:
	// W is 1, so a record confirmed now may be on one copy only (with one
	// copy left, every record is). See docs/failover.md, "Under-replicated
	// streams".
	LossLosesConfirmed bool `json:"loss_loses_confirmed"`
	// PublishesRefused says the stream's min_copies is above Copies: the
	// owner refuses every publish (CodeNotEnoughCopies) until copies are
	// added back.
	PublishesRefused bool `json:"publishes_refused"`
}

// UnderReplicated returns how a stream of e copies (E) with floor minCopies
// (0: none) stands under a, short since sinceMS, or nil when a holds e
// copies or more.
func (a Assignment) UnderReplicated(e, minCopies int, sinceMS int64) *UnderReplication {
	n := len(a.Copies())
	if n >= e {
		return nil
	}
	w := policy.StampW(a.Policy, n)
	return &UnderReplication{Copies: n, W: w, SinceMS: sinceMS, LossLosesConfirmed: w <= 1, PublishesRefused: BelowFloor(n, minCopies)}
}

// BelowFloor reports whether an assignment of copies copies is below a
// stream's min_copies floor (0: none): its owner then refuses publishes
// with CodeNotEnoughCopies and confirms nothing.
func BelowFloor(copies, minCopies int) bool { return copies < minCopies }

// HistoryStart records where an owner's history began: at Epoch, node Node
// took over with these record and cursor event tails.
type HistoryStart struct {
	Epoch      uint64 `json:"epoch"`
	RecordTail uint64 `json:"record_tail"`
	CursorTail uint64 `json:"cursor_tail"`
	Node       string `json:"node"`
}

// Retention bounds what a copy keeps. Zero fields mean no bound.
type Retention struct {
	MaxRecords uint64 `json:"max_records,omitempty"`
	MaxBytes   uint64 `json:"max_bytes,omitempty"`
	MaxAgeMS   int64  `json:"max_age_ms,omitempty"`
}

// LogEpoch says that a copy's logs from RecordStart and CursorStart on
// followed the owner history of Epoch.
type LogEpoch struct {
	Epoch       uint64 `json:"epoch"`
	RecordStart uint64 `json:"record_start"`
	CursorStart uint64 `json:"cursor_start"`
}

// PendingRecovery is committed when the owner of a replicated stream is
// lost: the stream moves only when the recovery worker finishes it.
type PendingRecovery struct {
	Stream string `json:"stream"`
	// Transition identifies this recovery; seals carry it, and a newer
	// transition at the same fence epoch takes an existing seal over.
	Transition uint64     `json:"transition"`
	Old        Assignment `json:"old"`
	// Proposal is the assignment the controller would have moved to; the
	// worker keeps its members that held no copy as new followers.
	Proposal Assignment `json:"proposal"`
	Reason   string     `json:"reason"` // "expired", "left", "drain", ...
	Since    int64      `json:"since_ms"`
	TraceID  string     `json:"trace_id,omitempty"`
	// TraceParent is the W3C traceparent of the failover's root span, so
	// the worker on whichever coordinator leads continues the same trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Wait says why the worker has not finished it yet, if it tried.
	Wait *RecoveryWait `json:"wait,omitempty"`
	// HandoffMS is, for a planned move (reason move), how long its
	// hand-off may take after this record: the move is recorded before
	// the owner's hand-off, and the leader leaves the recovery to the
	// mover that much longer than any move's.
	HandoffMS int64 `json:"handoff_ms,omitempty"`
}

// RecoveryWait is the recovery worker's latest reason to wait, published so
// that attention and stream.info can show it.
type RecoveryWait struct {
	Kind string `json:"kind"` // "answers" or "confirmed_prefix"
	// For "answers": how many copies answered of the R needed, and which did not.
	Answered   int      `json:"answered"`
	Needed     int      `json:"needed"`
	Unanswered []string `json:"unanswered,omitempty"`
	// For "confirmed_prefix": the latest start and the best tail seen.
	Start    *HistoryStart `json:"start,omitempty"`
	BestTail uint64        `json:"best_tail"`
	BestNode string        `json:"best_node,omitempty"`
	AtMS     int64         `json:"at_ms"`
}

// AcceptedLoss remembers an accepted owner loss that landed below the
// confirmed prefix, until an operator clears it.
type AcceptedLoss struct {
	Stream     string `json:"stream"`
	Epoch      uint64 `json:"epoch"`
	Node       string `json:"node"`
	RecordTail uint64 `json:"record_tail"`
	StartTail  uint64 `json:"start_tail"`
	AtMS       int64  `json:"at_ms"`
}
