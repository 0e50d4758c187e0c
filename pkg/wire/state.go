package wire

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
