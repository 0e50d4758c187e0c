package wire_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/schemas"
)

// validator compiles the embedded schemas on demand. Each test builds its
// own, so no state is shared between tests.
type validator struct {
	t        testing.TB
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

func newValidator(t testing.TB) *validator {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, name := range schemas.Names() {
		b, err := schemas.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("schema %s is not JSON: %v", name, err)
		}
		if err := c.AddResource(schemas.ID(name), doc); err != nil {
			t.Fatalf("add schema %s: %v", name, err)
		}
	}
	return &validator{t: t, compiler: c, compiled: map[string]*jsonschema.Schema{}}
}

// schema compiles loc, a file name optionally followed by a fragment such as
// "#/$defs/assignment".
func (v *validator) schema(loc string) *jsonschema.Schema {
	v.t.Helper()
	if s, ok := v.compiled[loc]; ok {
		return s
	}
	s, err := v.compiler.Compile(schemas.BaseURL + loc)
	if err != nil {
		v.t.Fatalf("compile %s: %v", loc, err)
	}
	v.compiled[loc] = s
	return s
}

// validate checks the JSON document doc against loc.
func (v *validator) validate(loc string, doc []byte) error {
	v.t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return v.schema(loc).Validate(inst)
}

const (
	tp  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	now = int64(1_760_000_123_456)
)

func def(name string) string { return schemas.DefsFile + "#/$defs/" + name }

// Realistic values, reused by the examples below.
var (
	exAssignment = wire.Assignment{Stream: "orders", StreamID: 17, Epoch: 4, Owner: "node-b",
		Followers: []string{"node-c", "node-a"}, Policy: "majority_durable"}
	exStart     = wire.HistoryStart{Epoch: 4, RecordTail: 9120, CursorTail: 311, Node: "node-b"}
	exRetention = wire.Retention{MaxRecords: 1_000_000, MaxAgeMS: 7 * 24 * 3600 * 1000}
	exWait      = wire.RecoveryWait{Kind: "confirmed_prefix", Answered: 2, Needed: 2,
		Start: &exStart, BestTail: 9000, BestNode: "node-c", AtMS: now}
	exRecovery = wire.PendingRecovery{Stream: "orders", Transition: 12, Old: exAssignment,
		Proposal: wire.Assignment{Stream: "orders", StreamID: 17, Epoch: 5, Owner: "node-c",
			Followers: []string{"node-a", "node-d"}, Policy: "majority_durable"},
		Reason: "expired", Since: now - 4000, TraceID: tid, TraceParent: tp, Wait: &exWait}
	exLoss      = wire.AcceptedLoss{Stream: "orders", Epoch: 6, Node: "node-a", RecordTail: 8800, StartTail: 9120, AtMS: now}
	exUnder     = wire.UnderReplication{Copies: 1, W: 1, SinceMS: now - 9000, LossLosesConfirmed: true, PublishesRefused: true}
	exCopyTails = []wire.CopyTails{
		{Node: "node-b", Role: wire.RoleOwner, Epoch: 4, RecordTail: 9250, CursorTail: 320, Published: true, AgeMS: 180},
		{Node: "node-c", Role: wire.RoleFollower, Epoch: 4, RecordTail: 9249, CursorTail: 320, Published: true, AgeMS: 410},
		{Node: "node-a", Published: false, AgeMS: 0},
	}
	exStreamInfo = wire.StreamInfo{Stream: "orders", StreamID: 17, Copies: 3, Policy: "majority_durable",
		W: 2, R: 2, Retention: exRetention, Assignment: exAssignment, Status: wire.StatusRecovering,
		Starts:   []wire.HistoryStart{{Epoch: 1, RecordTail: 0, CursorTail: 0, Node: "node-a"}, exStart},
		Recovery: &exRecovery, CopyTails: exCopyTails, LastTraceID: tid, AcceptedLoss: &exLoss, Version: 88}
	exShort = wire.StreamInfo{Stream: "orders", StreamID: 17, Copies: 3, Policy: "majority_durable", W: 1, R: 1, MinCopies: 2,
		Retention: exRetention, Assignment: wire.Assignment{Stream: "orders", StreamID: 17, Epoch: 6, Owner: "node-c", Followers: []string{}, Policy: "majority_durable"},
		Status: wire.StatusServing, Starts: []wire.HistoryStart{exStart}, CopyTails: exCopyTails, UnderReplicated: &exUnder, Version: 95}
	exCopyStatus = wire.CopyStatus{Stream: "orders", StreamID: 17, Role: wire.RoleOwner, Epoch: 4,
		RecordTail: 9250, CursorTail: 320, Confirmed: 9249}
	exAssigned = wire.AssignedStream{Assignment: exAssignment,
		Starts: []wire.HistoryStart{exStart}, Retention: exRetention, MinCopies: 2, TraceParent: tp}
	exCoordinator = wire.CoordinatorInfo{ReplicaID: 1, Address: "127.0.0.1:7301", Leader: true}
	exNode        = wire.NodeInfo{Node: "node-a", Incarnation: 1_760_000_000_001, State: wire.NodeLive, LastSeenMS: 230, Copies: 12}
	exEntry       = wire.AttentionEntry{Kind: wire.AttentionWaitPrefix, Severity: wire.SeverityCritical,
		Stream: "orders", Node: "node-b",
		Headline: "recovery of orders waits for a copy at or past record 9120 (started by node-b)",
		Figures:  map[string]any{"start_record_tail": 9120, "best_tail": 9000, "answered": 2}, SinceMS: now - 60_000}
	copiesHeld = 2
)

// exampleCase is one valid, realistic value and the schema it must satisfy.
type exampleCase struct {
	schema string
	value  any
}

// validExamples covers every wire type (TestEveryWireTypeHasASchema) and
// every schema file and object $def (TestEverySchemaIsUsed).
func validExamples() []exampleCase {
	return []exampleCase{
		// Admin requests.
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "orders", Copies: 3, Policy: "majority_durable", Retention: exRetention}},
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "audit_log-2", Copies: 1}},
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "orders", Copies: 3, MinCopies: 2}},
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "x", Copies: 5, Policy: "replica_accepted(3)"}},
		// Surrounding white space is ignored by the coordinator (package
		// policy, Normalize), so the request schema allows it.
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "x", Copies: 3, Policy: "majority_durable "}},
		{"stream-create.request.schema.json", wire.StreamCreate{Stream: "x", Copies: 3, Policy: "\treplica_durable(2)\n"}},
		{"stream-delete.request.schema.json", wire.StreamRef{Stream: "orders"}},
		{"stream-update.request.schema.json", wire.StreamUpdate{Stream: "orders", Policy: "local_durable", Retention: &exRetention, MinCopies: &copiesHeld}},
		{"stream-update.request.schema.json", wire.StreamUpdate{Stream: "orders", Policy: " majority_durable"}},
		{"stream-update.request.schema.json", wire.StreamUpdate{Stream: "orders", Retention: &wire.Retention{}, MinCopies: new(int)}},
		{"stream-info.request.schema.json", wire.StreamRef{Stream: "orders"}},
		{"stream-list.request.schema.json", wire.StreamListRequest{}},
		{"stream-list.request.schema.json", wire.StreamListRequest{Cursor: "orders", Limit: 500}},
		{"stream-list.request.schema.json", wire.StreamListRequest{Since: 88, Limit: 500}},
		{"cluster-info.request.schema.json", wire.Empty{}},
		{"attention-list.request.schema.json", wire.Empty{}},
		{"node-drain.request.schema.json", wire.NodeRef{Node: "node-a"}},
		{"node-leave.request.schema.json", wire.NodeRef{Node: "node-a"}},
		{"node-undrain.request.schema.json", wire.NodeRef{Node: "node-a"}},
		{"stream-move.request.schema.json", wire.StreamMove{Stream: "orders", Node: "node-b", TimeoutMS: 1500}},
		{"stream-move.request.schema.json", wire.StreamMove{Stream: "orders"}},
		{"recovery-withdraw.request.schema.json", wire.RecoveryWithdraw{Stream: "orders"}},
		{"recovery-accept-loss.request.schema.json", wire.RecoveryAcceptLoss{Stream: "orders", Node: "node-c"}},
		{"recovery-accept-loss.request.schema.json", wire.RecoveryAcceptLoss{Stream: "orders"}},
		{"attention-clear.request.schema.json", wire.AttentionClear{Stream: "orders"}},
		// Admin replies.
		{"stream-info.reply.schema.json", exStreamInfo},
		{"stream-info.reply.schema.json", exShort},
		{"stream-info.reply.schema.json", wire.StreamInfo{Stream: "fresh", StreamID: 18, Copies: 1, Policy: "local_durable",
			W: 1, R: 1, Assignment: wire.Assignment{Stream: "fresh", StreamID: 18, Epoch: 1, Owner: "node-a", Followers: []string{}, Policy: "local_durable"},
			Status: wire.StatusServing, Starts: []wire.HistoryStart{}, CopyTails: []wire.CopyTails{}, Version: 89}},
		{"stream-list.reply.schema.json", wire.StreamList{Streams: []wire.StreamInfo{exStreamInfo}, Version: 88}},
		{"stream-list.reply.schema.json", wire.StreamList{Streams: []wire.StreamInfo{}, Version: 1}},
		{"stream-list.reply.schema.json", wire.StreamList{Streams: []wire.StreamInfo{exStreamInfo}, Next: "orders", Version: 89}},
		{"stream-list.reply.schema.json", wire.StreamList{Streams: []wire.StreamInfo{exStreamInfo}, Version: 93, Since: 88, NextSince: 91, Deleted: []string{"old"}}},
		{"cluster-info.reply.schema.json", wire.ClusterInfo{
			Coordinators: []wire.CoordinatorInfo{exCoordinator, {ReplicaID: 2, Address: "127.0.0.1:7302"}, {ReplicaID: 3, Address: "127.0.0.1:7303"}},
			Leader:       1, Nodes: []wire.NodeInfo{exNode, {Node: "node-d", State: wire.NodeExpired, LastSeenMS: -1}, {Node: "node-e", State: wire.NodeLive, LastSeenMS: 10, DrainRequested: true}},
			Version: 88, AnsweredBy: 2}},
		{"cluster-info.reply.schema.json", wire.ClusterInfo{Coordinators: []wire.CoordinatorInfo{exCoordinator}, Nodes: []wire.NodeInfo{exNode},
			Version: 87, AnsweredBy: 3, Local: true}},
		{"ok.reply.schema.json", wire.OK{OK: true, Version: 90}},
		{"stream-move.reply.schema.json", wire.StreamMoveReply{Stream: "orders", From: "node-a", To: "node-b", Epoch: 5, HeldMS: 3, TookMS: 21, Version: 91}},
		{"node-drain.reply.schema.json", wire.NodeDrainReply{OK: true, Version: 92, Moving: []string{"orders"}, Staying: []wire.DrainStayer{}}},
		{"node-drain.reply.schema.json", wire.NodeDrainReply{OK: true, Version: 93, Moving: []string{}, Staying: []wire.DrainStayer{
			{Stream: "audit", Reason: wire.DrainStayOneCopy}, {Stream: "orders", Reason: wire.DrainStayNoLiveFollower}}}},
		{def("drain_stayer"), wire.DrainStayer{Stream: "audit", Reason: wire.DrainStayNotMoved}},
		{"handoff.request.schema.json", wire.HandoffRequest{Stream: "orders", StreamID: 17, Epoch: 4, Target: "node-b", TimeoutMS: 2000, HoldMS: 4000}},
		{"handoff.request.schema.json", wire.HandoffRequest{Stream: "orders", StreamID: 17, Epoch: 4, Target: "node-b", Resume: true}},
		{"handoff.reply.schema.json", wire.HandoffReply{Node: "node-a", Stream: "orders", Epoch: 4, RecordTail: 9250, CursorTail: 320, Digest: "9f86d081884c7d65", TookMS: 2}},
		{"error-reply.schema.json", wire.ErrorReply{Error: wire.Errorf(wire.CodeNotFound, "no stream %q", "orders")}},
		{"error-reply.schema.json", wire.ErrorReply{Error: &wire.Error{Code: wire.CodeConfirmTimeout, Message: "1 of 2 copies held the record", Copies: &copiesHeld}}},
		// Host and coordinator.
		{"heartbeat.schema.json", wire.Heartbeat{Node: "node-b", Incarnation: 1_760_000_000_002,
			Copies: []wire.CopyStatus{exCopyStatus, {Stream: "audit", StreamID: 3, Role: wire.RoleNone, Epoch: 2, RecordTail: 40, CursorTail: 0, Sealed: true}}, AtMS: now}},
		{"heartbeat.schema.json", wire.Heartbeat{Node: "node-b", Incarnation: 7, Leaving: true, Copies: []wire.CopyStatus{}, AtMS: now}},
		{"heartbeat.schema.json", wire.Heartbeat{Node: "node-b", Incarnation: 7, Leaving: true,
			StoreError: "streamlog: group commit: pebble: fatal commit error: write 000004.log: no space left on device", Copies: []wire.CopyStatus{}, AtMS: now}},
		{"heartbeat.schema.json", wire.Heartbeat{Node: "node-b", Incarnation: 7, Copies: []wire.CopyStatus{exCopyStatus}, AtMS: now, Beat: 12, Part: 2, Parts: 3}},
		{"heartbeat.schema.json", wire.Heartbeat{Node: "node-b", Incarnation: 7, AtMS: now, Beat: 14, Delta: true, Since: 12,
			Copies: []wire.CopyStatus{exCopyStatus, {Stream: "audit", StreamID: 3, Role: wire.RoleNone, Gone: true}}}},
		{"assign-notice.schema.json", wire.AssignNotice{Version: 91}},
		{"assign-notice.schema.json", wire.AssignNotice{Version: 92, Recovery: true, Assigned: &exAssigned}},
		{"owner-notice.schema.json", wire.OwnerNotice{Stream: "orders", StreamID: 17, Epoch: 5, Node: "node-c"}},
		{"assignment-pull.request.schema.json", wire.AssignmentPull{Node: "node-c"}},
		{"assignment-pull.request.schema.json", wire.AssignmentPull{Node: "node-c", After: "orders", Limit: 500}},
		{"assignment-snapshot.reply.schema.json", wire.AssignmentSnapshot{Version: 91, Node: "node-c",
			Assignments: []wire.AssignedStream{exAssigned, {Assignment: wire.Assignment{Stream: "audit", StreamID: 3, Epoch: 1, Owner: "node-c", Followers: []string{}}, Starts: []wire.HistoryStart{}}},
			Streams:     map[string]uint64{"orders": 17, "audit": 3, "gone-soon": 4}}},
		{"assignment-snapshot.reply.schema.json", wire.AssignmentSnapshot{Version: 92, Node: "node-c",
			Assignments: []wire.AssignedStream{}, Streams: map[string]uint64{"zeta": 9}, Next: "zeta"}},
		{"seal.request.schema.json", wire.SealRequest{Stream: "orders", StreamID: 17, FenceEpoch: 5, Transition: 12, TraceParent: tp}},
		{"seal.reply.schema.json", wire.SealReply{Node: "node-c", Stream: "orders", FenceEpoch: 5, Transition: 12,
			RecordHead: 100, RecordTail: 9249, CursorTail: 320,
			LogEpochs: []wire.LogEpoch{{Epoch: 1, RecordStart: 0, CursorStart: 0}, {Epoch: 4, RecordStart: 9120, CursorStart: 311}},
			Digest:    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}},
		{"seal.reply.schema.json", wire.SealReply{Node: "node-a", Stream: "orders", FenceEpoch: 5, Transition: 12,
			RecordHead: 100, RecordTail: 9301, CursorTail: 320, LogEpochs: []wire.LogEpoch{{Epoch: 4, RecordStart: 9120, CursorStart: 311}},
			Digest: "00ff", Confirmed: 9249}},
		{"seal-batch.request.schema.json", wire.SealBatch{Seals: []wire.SealRequest{
			{Stream: "orders", StreamID: 17, FenceEpoch: 5, Transition: 12, TraceParent: tp},
			{Stream: "audit", StreamID: 3, FenceEpoch: 2, Transition: 13}}, TimeoutMs: 900}},
		{"seal-batch.reply.schema.json", wire.SealBatchReply{Replies: []wire.SealResult{
			{Reply: &wire.SealReply{Node: "node-c", Stream: "orders", FenceEpoch: 5, Transition: 12, Digest: "00ff"}},
			{Error: wire.Errorf(wire.CodeNotFound, "node node-c holds no copy of stream audit with id 3")}}}},
		{"seal-batch.reply.schema.json#/$defs/seal_result", wire.SealResult{Error: wire.Errorf(wire.CodeStaleEpoch, "stale")}},
		// Stream data plane, JSON parts.
		{"fetch.request.schema.json", wire.FetchRequest{Cursor: "billing", MaxRecords: 500, MaxBytes: 1 << 20, WaitMS: 2000}},
		{"fetch.request.schema.json", wire.FetchRequest{Start: "offset", Offset: 9000}},
		{"fetch.request.schema.json", wire.FetchRequest{Start: "earliest"}},
		{"cursor-commit.request.schema.json", wire.CursorCommit{Cursor: "billing", Offset: 9200}},
		{"cursor-commit.reply.schema.json", wire.CursorCommitReply{Cursor: "billing", Offset: 9200, EventOffset: 321}},
		{"publish-confirm.reply.schema.json", wire.PublishConfirm{StreamID: 12, Offset: 9250, Epoch: 4, Copies: 2, W: 2}},
		{"publish-confirm.reply.schema.json", wire.PublishConfirm{StreamID: 12, Offset: 9001, Epoch: 4, Copies: 3, W: 2, Duplicate: true}},
		{"attention-list.reply.schema.json", wire.AttentionListReply{Entries: []wire.AttentionEntry{exEntry,
			{Kind: wire.AttentionNodeHolds, Severity: wire.SeverityWarning, Node: "node-d", Headline: "node-d is gone holding 3 copies", Figures: map[string]any{"copies": 3}, SinceMS: now},
			{Kind: wire.AttentionStoreFailed, Severity: wire.SeverityCritical, Node: "node-b", Headline: "the store of node-b failed: no space left on device",
				Figures: map[string]any{"error": "no space left on device", "copies": 2}, SinceMS: now}},
			Version: 88, AtMS: now}},
		{"attention-list.reply.schema.json", wire.AttentionListReply{Entries: []wire.AttentionEntry{}, Version: 0, AtMS: now}},
		// Shared shapes, each on its own.
		{def("assignment"), exAssignment},
		{def("assignment"), wire.Assignment{Stream: "old", StreamID: 1, Epoch: 1, Owner: "n1", Followers: []string{"n2"}, Policy: ""}},
		{def("history_start"), exStart},
		{def("retention"), exRetention},
		{def("retention"), wire.Retention{}},
		{def("log_epoch"), wire.LogEpoch{Epoch: 4, RecordStart: 9120, CursorStart: 311}},
		{def("pending_recovery"), exRecovery},
		{def("pending_recovery"), wire.PendingRecovery{Stream: "orders", Transition: 1, Old: exAssignment, Proposal: exAssignment, Reason: "drain", Since: now}},
		{def("recovery_wait"), exWait},
		{def("recovery_wait"), wire.RecoveryWait{Kind: "answers", Answered: 1, Needed: 2, Unanswered: []string{"node-a"}, AtMS: now}},
		{def("accepted_loss"), exLoss},
		{def("under_replication"), exUnder},
		{def("under_replication"), wire.UnderReplication{Copies: 2, W: 2, SinceMS: now}},
		{def("copy_tails"), exCopyTails[0]},
		{def("copy_status"), exCopyStatus},
		{def("assigned_stream"), exAssigned},
		{def("stream_info"), exStreamInfo},
		{def("coordinator_info"), exCoordinator},
		{def("node_info"), exNode},
		{def("attention_entry"), exEntry},
		{def("error"), wire.Error{Code: wire.CodeSealed, Message: "orders is sealed at epoch 5"}},
		{def("empty"), wire.Empty{}},
	}
}

func TestValidExamples(t *testing.T) {
	v := newValidator(t)
	for i, c := range validExamples() {
		t.Run(fmt.Sprintf("%02d_%T", i, c.value), func(t *testing.T) {
			doc, err := json.Marshal(c.value)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.validate(c.schema, doc); err != nil {
				t.Fatalf("%s rejects %s:\n%v", c.schema, doc, err)
			}
		})
	}
}

// mutate marshals base, lets change edit it as a generic JSON object and
// returns the result.
func mutate(t testing.TB, base any, change func(m map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	change(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func set(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
func del(k string) func(map[string]any)        { return func(m map[string]any) { delete(m, k) } }

// in applies change to the object at key k.
func in(k string, change func(map[string]any)) func(map[string]any) {
	return func(m map[string]any) { change(m[k].(map[string]any)) }
}

// first applies change to the first element of the array at key k.
func first(k string, change func(map[string]any)) func(map[string]any) {
	return func(m map[string]any) { change(m[k].([]any)[0].(map[string]any)) }
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMalformedExamplesAreRejected(t *testing.T) {
	v := newValidator(t)
	long := strings.Repeat("s", wire.MaxNameLen+1)
	create := wire.StreamCreate{Stream: "orders", Copies: 3, Policy: "majority_durable"}
	hb := wire.Heartbeat{Node: "node-b", Incarnation: 1, Copies: []wire.CopyStatus{exCopyStatus}, AtMS: now}
	snap := wire.AssignmentSnapshot{Version: 1, Node: "node-c", Assignments: []wire.AssignedStream{exAssigned}, Streams: map[string]uint64{"orders": 17}}
	seal := wire.SealRequest{Stream: "orders", StreamID: 17, FenceEpoch: 5, Transition: 12}
	sealReply := wire.SealReply{Node: "node-c", Stream: "orders", FenceEpoch: 5, Transition: 12,
		LogEpochs: []wire.LogEpoch{{Epoch: 4}}, Digest: "00ff"}
	errReply := wire.ErrorReply{Error: wire.Errorf(wire.CodeNotOwner, "node-a does not own orders")}
	attn := wire.AttentionListReply{Entries: []wire.AttentionEntry{exEntry}, Version: 1, AtMS: now}
	cluster := wire.ClusterInfo{Coordinators: []wire.CoordinatorInfo{exCoordinator}, Leader: 1, Nodes: []wire.NodeInfo{exNode}, Version: 1, AnsweredBy: 1}

	cases := []struct {
		name   string
		schema string
		doc    []byte
	}{
		{"create: missing stream", "stream-create.request.schema.json", mutate(t, create, del("stream"))},
		{"create: missing copies", "stream-create.request.schema.json", mutate(t, create, del("copies"))},
		{"create: negative copies", "stream-create.request.schema.json", mutate(t, create, set("copies", -1))},
		{"create: zero copies", "stream-create.request.schema.json", mutate(t, create, set("copies", 0))},
		{"create: fractional copies", "stream-create.request.schema.json", mutate(t, create, set("copies", 2.5))},
		{"create: copies as string", "stream-create.request.schema.json", mutate(t, create, set("copies", "3"))},
		{"create: unknown field", "stream-create.request.schema.json", mutate(t, create, set("replicas", 3))},
		{"create: oversize name", "stream-create.request.schema.json", mutate(t, create, set("stream", long))},
		{"create: empty name", "stream-create.request.schema.json", mutate(t, create, set("stream", ""))},
		{"create: dot in name", "stream-create.request.schema.json", mutate(t, create, set("stream", "orders.eu"))},
		{"create: wildcard name", "stream-create.request.schema.json", mutate(t, create, set("stream", "*"))},
		{"create: space in name", "stream-create.request.schema.json", mutate(t, create, set("stream", "my orders"))},
		{"create: unknown policy", "stream-create.request.schema.json", mutate(t, create, set("policy", "majority"))},
		{"create: zero replica count", "stream-create.request.schema.json", mutate(t, create, set("policy", "replica_durable(0)"))},
		{"create: empty policy", "stream-create.request.schema.json", mutate(t, create, set("policy", ""))},
		{"create: blank policy", "stream-create.request.schema.json", mutate(t, create, set("policy", "  "))},
		{"create: space inside policy", "stream-create.request.schema.json", mutate(t, create, set("policy", "replica_durable( 2)"))},
		{"info: padded policy", "stream-info.reply.schema.json", mutate(t, exStreamInfo, set("policy", "majority_durable "))},
		{"create: negative retention", "stream-create.request.schema.json", mutate(t, create, set("retention", map[string]any{"max_records": -1}))},
		{"create: unknown retention field", "stream-create.request.schema.json", mutate(t, create, set("retention", map[string]any{"max_days": 3}))},
		{"create: array body", "stream-create.request.schema.json", []byte(`[{"stream":"orders","copies":3}]`)},
		{"create: negative min copies", "stream-create.request.schema.json", mutate(t, create, set("min_copies", -1))},
		{"update: missing stream", "stream-update.request.schema.json", []byte(`{"policy":"local_durable"}`)},
		{"update: unknown field", "stream-update.request.schema.json", []byte(`{"stream":"orders","copies":5}`)},
		{"update: empty policy", "stream-update.request.schema.json", []byte(`{"stream":"orders","policy":""}`)},
		{"update: negative min copies", "stream-update.request.schema.json", []byte(`{"stream":"orders","min_copies":-1}`)},
		{"update: null retention", "stream-update.request.schema.json", []byte(`{"stream":"orders","retention":null}`)},
		{"delete: unknown field", "stream-delete.request.schema.json", []byte(`{"stream":"orders","force":true}`)},
		{"delete: null stream", "stream-delete.request.schema.json", []byte(`{"stream":null}`)},
		{"info: missing stream", "stream-info.request.schema.json", []byte(`{}`)},
		{"list: any field", "stream-list.request.schema.json", []byte(`{"verbose":true}`)},
		{"list: negative limit", "stream-list.request.schema.json", []byte(`{"limit":-1}`)},
		{"cluster info: any field", "cluster-info.request.schema.json", []byte(`{"x":1}`)},
		{"attention list: any field", "attention-list.request.schema.json", []byte(`{"x":1}`)},
		{"drain: subject injection", "node-drain.request.schema.json", []byte(`{"node":"node-a.seal"}`)},
		{"leave: missing node", "node-leave.request.schema.json", []byte(`{}`)},
		{"withdraw: oversize name", "recovery-withdraw.request.schema.json", marshal(t, wire.RecoveryWithdraw{Stream: long})},
		{"accept loss: empty node", "recovery-accept-loss.request.schema.json", []byte(`{"stream":"orders","node":""}`)},
		{"accept loss: unknown field", "recovery-accept-loss.request.schema.json", []byte(`{"stream":"orders","to":"node-a"}`)},
		{"attention clear: number", "attention-clear.request.schema.json", []byte(`{"stream":17}`)},

		{"stream info: bad status", "stream-info.reply.schema.json", mutate(t, exStreamInfo, set("status", "dead"))},
		{"stream info: w zero", "stream-info.reply.schema.json", mutate(t, exStreamInfo, set("w", 0))},
		{"stream info: missing starts", "stream-info.reply.schema.json", mutate(t, exStreamInfo, del("starts"))},
		{"stream info: null starts", "stream-info.reply.schema.json", mutate(t, exStreamInfo, set("starts", nil))},
		{"stream info: bad wait kind", "stream-info.reply.schema.json", mutate(t, exStreamInfo, in("recovery", in("wait", set("kind", "bored"))))},
		{"stream info: copy tail role", "stream-info.reply.schema.json", mutate(t, exStreamInfo, first("copy_tails", set("role", "leader")))},
		{"stream info: bad trace id", "stream-info.reply.schema.json", mutate(t, exStreamInfo, set("last_trace_id", "xyz"))},
		{"stream info: under-replicated w zero", "stream-info.reply.schema.json", mutate(t, exShort, in("under_replicated", set("w", 0)))},
		{"stream info: under-replicated without since", "stream-info.reply.schema.json", mutate(t, exShort, in("under_replicated", del("since_ms")))},
		{"stream list: null streams", "stream-list.reply.schema.json", []byte(`{"streams":null,"version":1}`)},
		{"cluster info: bad node state", "cluster-info.reply.schema.json", mutate(t, cluster, first("nodes", set("state", "zombie")))},
		{"cluster info: last seen below -1", "cluster-info.reply.schema.json", mutate(t, cluster, first("nodes", set("last_seen_ms", -2)))},
		{"cluster info: replica id zero", "cluster-info.reply.schema.json", mutate(t, cluster, first("coordinators", set("replica_id", 0)))},
		{"ok: false", "ok.reply.schema.json", []byte(`{"ok":false,"version":3}`)},
		{"ok: missing version", "ok.reply.schema.json", []byte(`{"ok":true}`)},
		{"error: null error", "error-reply.schema.json", []byte(`{"error":null}`)},
		{"error: unknown code", "error-reply.schema.json", mutate(t, errReply, in("error", set("code", "oops")))},
		{"error: missing message", "error-reply.schema.json", mutate(t, errReply, in("error", del("message")))},
		{"error: negative copies", "error-reply.schema.json", mutate(t, errReply, in("error", set("copies", -1)))},
		{"error: flat shape", "error-reply.schema.json", []byte(`{"code":"not_found","message":"no"}`)},

		{"heartbeat: null copies", "heartbeat.schema.json", mutate(t, hb, set("copies", nil))},
		{"heartbeat: missing incarnation", "heartbeat.schema.json", mutate(t, hb, del("incarnation"))},
		{"heartbeat: unknown role", "heartbeat.schema.json", mutate(t, hb, first("copies", set("role", "leader")))},
		{"heartbeat: negative tail", "heartbeat.schema.json", mutate(t, hb, first("copies", set("record_tail", -1)))},
		{"heartbeat: fractional tail", "heartbeat.schema.json", mutate(t, hb, first("copies", set("record_tail", 1.5)))},
		{"heartbeat: tail past uint64", "heartbeat.schema.json", bytes.Replace(marshal(t, hb), []byte(`"record_tail":9250`), []byte(`"record_tail":18446744073709551616`), 1)},
		{"heartbeat: missing sealed", "heartbeat.schema.json", mutate(t, hb, first("copies", del("sealed")))},
		{"heartbeat: unknown copy field", "heartbeat.schema.json", mutate(t, hb, first("copies", set("lag", 3)))},
		{"heartbeat: zero parts", "heartbeat.schema.json", mutate(t, hb, set("parts", 0))},
		{"heartbeat: negative part", "heartbeat.schema.json", mutate(t, hb, set("part", -1))},
		{"heartbeat: too many parts", "heartbeat.schema.json", mutate(t, hb, set("parts", 1025))},
		{"notice: version as string", "assign-notice.schema.json", []byte(`{"version":"91"}`)},
		{"pull: bad node", "assignment-pull.request.schema.json", []byte(`{"node":"node a"}`)},
		{"snapshot: missing starts", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", del("starts")))},
		{"snapshot: null starts", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", set("starts", nil)))},
		{"snapshot: null followers", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", in("assignment", set("followers", nil))))},
		{"snapshot: null streams", "assignment-snapshot.reply.schema.json", mutate(t, snap, set("streams", nil))},
		{"snapshot: duplicate follower", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", in("assignment", set("followers", []string{"node-c", "node-c"}))))},
		{"snapshot: bad policy stamp", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", in("assignment", set("policy", "all"))))},
		{"snapshot: bad stream key", "assignment-snapshot.reply.schema.json", mutate(t, snap, set("streams", map[string]any{"a.b": 1}))},
		{"snapshot: negative stream id", "assignment-snapshot.reply.schema.json", mutate(t, snap, set("streams", map[string]any{"orders": -1}))},
		{"snapshot: bad traceparent", "assignment-snapshot.reply.schema.json", mutate(t, snap, first("assignments", set("traceparent", "00-xyz")))},
		{"seal: fence epoch zero", "seal.request.schema.json", mutate(t, seal, set("fence_epoch", 0))},
		{"seal: missing transition", "seal.request.schema.json", mutate(t, seal, del("transition"))},
		{"seal: unknown field", "seal.request.schema.json", mutate(t, seal, set("force", true))},
		{"seal batch: empty", "seal-batch.request.schema.json", mutate(t, wire.SealBatch{Seals: []wire.SealRequest{seal}}, set("seals", []any{}))},
		{"seal batch: bad entry", "seal-batch.request.schema.json", mutate(t, wire.SealBatch{Seals: []wire.SealRequest{seal}}, first("seals", del("stream")))},
		{"seal batch: too many", "seal-batch.request.schema.json", marshal(t, wire.SealBatch{Seals: slices.Repeat([]wire.SealRequest{seal}, wire.MaxSealBatch+1)})},
		{"seal batch reply: both", "seal-batch.reply.schema.json", marshal(t, wire.SealBatchReply{Replies: []wire.SealResult{{Reply: &sealReply, Error: errReply.Error}}})},
		{"seal batch reply: neither", "seal-batch.reply.schema.json", marshal(t, wire.SealBatchReply{Replies: []wire.SealResult{{}}})},
		{"seal reply: uppercase digest", "seal.reply.schema.json", mutate(t, sealReply, set("digest", "00FF"))},
		{"seal reply: null log epochs", "seal.reply.schema.json", mutate(t, sealReply, set("log_epochs", nil))},
		{"seal reply: missing log epoch field", "seal.reply.schema.json", mutate(t, sealReply, first("log_epochs", del("cursor_start")))},

		{"fetch: neither cursor nor start", "fetch.request.schema.json", []byte(`{"max_records":10}`)},
		{"fetch: unknown start", "fetch.request.schema.json", []byte(`{"start":"middle"}`)},
		{"fetch: negative max records", "fetch.request.schema.json", []byte(`{"cursor":"c","max_records":-5}`)},
		{"fetch: unknown field", "fetch.request.schema.json", []byte(`{"cursor":"c","group":"g"}`)},
		{"commit: missing cursor", "cursor-commit.request.schema.json", []byte(`{"offset":3}`)},
		{"commit: negative offset", "cursor-commit.request.schema.json", []byte(`{"cursor":"c","offset":-1}`)},
		{"commit: unknown field", "cursor-commit.request.schema.json", []byte(`{"cursor":"c","offset":1,"sync":true}`)},
		{"commit reply: missing event offset", "cursor-commit.reply.schema.json", []byte(`{"cursor":"c","offset":1}`)},
		{"confirm: zero copies", "publish-confirm.reply.schema.json", []byte(`{"stream_id":1,"offset":1,"epoch":1,"copies":0,"w":1}`)},
		{"confirm: missing w", "publish-confirm.reply.schema.json", []byte(`{"stream_id":1,"offset":1,"epoch":1,"copies":2}`)},
		{"confirm: missing stream id", "publish-confirm.reply.schema.json", []byte(`{"offset":1,"epoch":1,"copies":2,"w":1}`)},
		{"attention: null entries", "attention-list.reply.schema.json", mutate(t, attn, set("entries", nil))},
		{"attention: unknown kind", "attention-list.reply.schema.json", mutate(t, attn, first("entries", set("kind", "something_odd")))},
		{"attention: bad severity", "attention-list.reply.schema.json", mutate(t, attn, first("entries", set("severity", "high")))},
		{"attention: bad figure name", "attention-list.reply.schema.json", mutate(t, attn, first("entries", set("figures", map[string]any{"Best Tail": 1})))},
		{"attention: null figures", "attention-list.reply.schema.json", mutate(t, attn, first("entries", set("figures", nil)))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := v.validate(c.schema, c.doc)
			if err == nil {
				t.Fatalf("%s accepts %s", c.schema, c.doc)
			}
			// The reason, for reviewing that each case fails for the
			// reason its name says (go test -v).
			t.Logf("rejected: %v", err)
		})
	}
}

// objectSchema resolves loc to its object schema as plain JSON, following
// one $ref into the shared definitions.
func objectSchema(t *testing.T, loc string) map[string]any {
	t.Helper()
	file, frag, _ := strings.Cut(loc, "#")
	b, err := schemas.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if frag != "" {
		name, ok := strings.CutPrefix(frag, "/$defs/")
		if !ok {
			t.Fatalf("%s: unsupported fragment", loc)
		}
		d, ok := doc["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			t.Fatalf("%s: no such definition", loc)
		}
		return d
	}
	if ref, ok := doc["$ref"].(string); ok {
		return objectSchema(t, ref)
	}
	return doc
}

// TestSchemasMatchGoFields checks every schema used by an example against
// its Go type field by field: the properties are exactly the JSON fields,
// the required ones exactly those without omitempty, and the object is
// closed. A field added on either side fails here.
func TestSchemasMatchGoFields(t *testing.T) {
	for _, c := range validExamples() {
		typ := reflect.TypeOf(c.value)
		s := objectSchema(t, c.schema)
		if s["type"] != "object" {
			t.Errorf("%s (%s): type %v, want object", c.schema, typ, s["type"])
			continue
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s (%s): object is not closed", c.schema, typ)
		}
		props, _ := s["properties"].(map[string]any)
		required := map[string]bool{}
		for _, r := range asSlice(s["required"]) {
			required[r.(string)] = true
		}
		fields := map[string]bool{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s has no JSON name", typ, f.Name)
				continue
			}
			fields[name] = true
			if _, ok := props[name]; !ok {
				t.Errorf("%s: %s.%s (%q) missing from schema", c.schema, typ, f.Name, name)
			}
			omit := strings.Contains(opts, "omitempty")
			if required[name] == omit {
				t.Errorf("%s: %q required=%v but omitempty=%v in %s", c.schema, name, required[name], omit, typ)
			}
		}
		for name := range props {
			if !fields[name] {
				t.Errorf("%s: property %q has no field in %s", c.schema, name, typ)
			}
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
