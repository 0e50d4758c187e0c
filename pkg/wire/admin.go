package wire

// StreamCreate creates a stream with Copies copies (E). Policy defaults to
// the cluster's default confirm policy.
type StreamCreate struct {
	Stream    string    `json:"stream"`
	Copies    int       `json:"copies"`
	Policy    string    `json:"policy,omitempty"`
	Retention Retention `json:"retention,omitempty"`
	// MinCopies is the floor of copies below which the owner refuses
	// publishes (CodeNotEnoughCopies) instead of confirming them: 1 to
	// Copies, or 0 (absent) for no floor.
	MinCopies int `json:"min_copies,omitempty"`
}

// StreamUpdate changes an existing stream: each field present replaces the
// stream's own, each absent one is kept. A new Policy that needs no more
// copies to confirm under the stream's assignment (W' <= W) is committed at
// once; one that needs more goes through a recovery (seal and promote, as
// for an owner change), and the stream serves under it at the next epoch.
// MinCopies 0 removes the floor.
type StreamUpdate struct {
	Stream    string     `json:"stream"`
	Policy    string     `json:"policy,omitempty"`
	Retention *Retention `json:"retention,omitempty"`
	MinCopies *int       `json:"min_copies,omitempty"`
}

// StreamRef names a stream, for delete and info.
type StreamRef struct {
	Stream string `json:"stream"`
}

// Empty is the request of verbs that take no arguments (stream.list,
// cluster.info). An empty body is accepted too.
type Empty struct{}

// NodeRef names a node, for node.drain and node.leave.
type NodeRef struct {
	Node string `json:"node"`
}

// RecoveryWithdraw withdraws the pending recovery of Stream; the controller
// then records a new one.
type RecoveryWithdraw struct {
	Stream string `json:"stream"`
}

// RecoveryAcceptLoss moves Stream to Node (or, if empty, the live copy with
// the furthest published tail) without sealing anything.
type RecoveryAcceptLoss struct {
	Stream string `json:"stream"`
	Node   string `json:"node,omitempty"`
}

// AttentionClear clears an accepted-loss warning of Stream.
type AttentionClear struct {
	Stream string `json:"stream"`
}

// Stream statuses in StreamInfo.
const (
	StatusServing    = "serving"
	StatusRecovering = "recovering"
	StatusWaiting    = "waiting" // a recovery that waits (answers or confirmed prefix), or an owner-only stream whose owner is gone
	// StatusPlacing is stream.create's answer when the stream is created
	// but its owner did not serve it within the create's bounded wait: a
	// publish may still meet no responders for a moment.
	StatusPlacing = "placing"
)

// StreamInfo describes one stream: its assignment, the copies' tails from
// their last heartbeats, and its status.
type StreamInfo struct {
	Stream   string `json:"stream"`
	StreamID uint64 `json:"stream_id"`
	Copies   int    `json:"copies"`
	Policy   string `json:"policy"`
	W        int    `json:"w"`
	R        int    `json:"r"`
	// MinCopies is the stream's floor (StreamCreate.MinCopies); 0: none.
	MinCopies  int              `json:"min_copies,omitempty"`
	Retention  Retention        `json:"retention"`
	Assignment Assignment       `json:"assignment"`
	Status     string           `json:"status"`
	Starts     []HistoryStart   `json:"starts"`
	Recovery   *PendingRecovery `json:"recovery,omitempty"`
	CopyTails  []CopyTails      `json:"copy_tails"`
	// LastTraceID is the trace of the stream's latest failover.
	LastTraceID string `json:"last_trace_id,omitempty"`
	// AcceptedLoss is set while an accepted owner loss that landed below the
	// confirmed prefix has not been cleared by an operator.
	AcceptedLoss *AcceptedLoss `json:"accepted_loss,omitempty"`
	// UnderReplicated is set while the assignment holds fewer copies than
	// Copies (Assignment.UnderReplicated).
	UnderReplicated *UnderReplication `json:"under_replicated,omitempty"`
	Version         uint64            `json:"version"`
}

// CopyTails is one copy's state as its node last published it.
type CopyTails struct {
	Node       string `json:"node"`
	Role       string `json:"role"`
	Epoch      uint64 `json:"epoch"`
	RecordTail uint64 `json:"record_tail"`
	CursorTail uint64 `json:"cursor_tail"`
	Sealed     bool   `json:"sealed"`
	// Published is false while the node has published nothing for the copy.
	Published bool  `json:"published"`
	AgeMS     int64 `json:"age_ms"`
}

// StreamListRequest asks stream.list for the streams in name order. With
// Limit 0 (or an empty body) the reply holds every stream; with Limit > 0
// it holds up to Limit streams whose names sort after Cursor, and its Next
// is the Cursor of the following page ("" after the last page).
type StreamListRequest struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// Since, when set, asks only for what changed after that version of
	// the state (a reader that holds the list as of Since): the streams
	// changed and the names of those deleted (StreamList.Since says
	// whether the coordinator could answer so). Cursor is then unused;
	// the next page is asked with the reply's NextSince.
	Since uint64 `json:"since,omitempty"`
}

// StreamList lists the streams (every stream, or one page of them), or
// what changed after a version.
type StreamList struct {
	Streams []StreamInfo `json:"streams"`
	// Next is the cursor of the next page when the request had a limit
	// and more streams follow; "" otherwise.
	Next    string `json:"next,omitempty"`
	Version uint64 `json:"version"`
	// Since is set in the answer to a request with Since that lists
	// changes: Streams are the streams changed after Since (each as it
	// is at Version), Deleted the names of those deleted, and NextSince,
	// when set, the Since of the next page. 0 when the coordinator cannot
	// say what changed after the version asked (its change log starts
	// later, as after a restart, or a node's state changed since, which
	// moves the status of every stream it owns): the reply is then the
	// first page of a full listing, and Next its cursor.
	Since     uint64   `json:"since,omitempty"`
	NextSince uint64   `json:"next_since,omitempty"`
	Deleted   []string `json:"deleted,omitempty"`
}

// ClusterInfo describes the coordinators and the stream hosts.
type ClusterInfo struct {
	Coordinators []CoordinatorInfo `json:"coordinators"`
	Leader       uint64            `json:"leader"`
	Nodes        []NodeInfo        `json:"nodes"`
	Version      uint64            `json:"version"`
	// AnsweredBy is the replica id of the coordinator that answered.
	AnsweredBy uint64 `json:"answered_by"`
	// Local is true when the answer comes from the answering replica's
	// own copy of the state, read without a quorum (it knows no leader or
	// none confirmed in time): it may be behind, so a watcher does not
	// follow it.
	Local bool `json:"local,omitempty"`
}

// CoordinatorInfo is one Raft replica.
type CoordinatorInfo struct {
	ReplicaID uint64 `json:"replica_id"`
	Address   string `json:"address"`
	Leader    bool   `json:"leader"`
}

// NodeInfo is one stream host as the replicated state and the answering
// coordinator's liveness view see it.
type NodeInfo struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	State       string `json:"state"`
	LastSeenMS  int64  `json:"last_seen_ms"` // -1 if never seen by this coordinator
	Copies      int    `json:"copies"`
	// DrainRequested is true while a node.drain moves the streams of this
	// live node away (it takes no copy and no ownership meanwhile).
	DrainRequested bool `json:"drain_requested,omitempty"`
}

// OK is the reply of a write that returns nothing else.
type OK struct {
	OK      bool   `json:"ok"`
	Version uint64 `json:"version"`
}
