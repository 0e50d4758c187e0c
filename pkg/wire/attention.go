package wire

// Attention kinds: stable names for what an operator must look at.
const (
	AttentionWaitPrefix   = "recovery_waiting_confirmed_prefix"
	AttentionWaitAnswers  = "recovery_waiting_answers"
	AttentionBelowPolicy  = "stream_below_confirm_policy"
	AttentionSealedLeft   = "sealed_copy_left_out"
	AttentionAcceptedLoss = "accepted_loss_below_prefix"
	AttentionNodeHolds    = "node_gone_holding_copies"
	AttentionFollowerLag  = "follower_not_catching_up"
	AttentionOwnerOnly    = "owner_only_stream_waiting"
	AttentionStoreFailed  = "host_store_failed"
	AttentionUnderRepl    = "under_replicated"
	AttentionDrainStuck   = "drain_stuck"
)

// Severities.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// AttentionEntry is one thing an operator must see.
type AttentionEntry struct {
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	Stream   string `json:"stream,omitempty"`
	Node     string `json:"node,omitempty"`
	Headline string `json:"headline"`
	// Figures are the numbers behind the headline, by name.
	Figures map[string]any `json:"figures"`
	SinceMS int64          `json:"since_ms"`
}

// AttentionListReply is the whole list.
type AttentionListReply struct {
	Entries []AttentionEntry `json:"entries"`
	// Version is the coordinator state version the list was judged from.
	Version uint64 `json:"version"`
	AtMS    int64  `json:"at_ms"`
}
