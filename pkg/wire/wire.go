// Package wire holds the Go types of brook's control-plane messages and the
// NATS subjects they travel on. Every type here has a JSON Schema (2020-12)
// under schemas/ in the repository root; the tests in this package validate
// examples of each type against those schemas, so the two cannot drift apart.
//
// Data-plane messages (publish payloads, fetch and replication batches) use
// the binary frames of package frame instead.
package wire

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxNameLen bounds stream, cursor and node names. Names are NATS subject
// tokens, so they are also restricted to NameRE.
const MaxNameLen = 64

// NameRE is what a stream, cursor or node name may hold: it must be usable as
// one NATS subject token and as a file name.
var NameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s is a valid stream, cursor or node name, with a
// reason when it is not.
func ValidName(kind, s string) error {
	if s == "" {
		return &Error{Code: CodeBadRequest, Message: kind + " name is empty"}
	}
	if len(s) > MaxNameLen {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s name is %d bytes, more than %d", kind, len(s), MaxNameLen)}
	}
	if !NameRE.MatchString(s) {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s name %q may hold only letters, digits, '_' and '-'", kind, s)}
	}
	return nil
}

// Subjects. Stream and node names are single subject tokens (see NameRE).
const (
	SubjectPrefix = "brook."

	// AdminPrefix + verb, e.g. "brook.admin.stream.create". Any coordinator
	// answers, in queue group AdminQueue.
	AdminPrefix = "brook.admin."
	AdminQueue  = "brook-coordinators"

	// AssignPull is a request for the assignment snapshot that concerns one
	// node (AssignmentPull -> AssignmentSnapshot); any coordinator answers,
	// in queue group AdminQueue.
	AssignPull = "brook.assignments.pull"

	// AttentionList is answered by the attention service with AttentionList.
	AttentionList = "brook.attention.list"
)

// Admin verbs.
const (
	VerbStreamCreate       = "stream.create"
	VerbStreamDelete       = "stream.delete"
	VerbStreamUpdate       = "stream.update"
	VerbStreamInfo         = "stream.info"
	VerbStreamList         = "stream.list"
	VerbClusterInfo        = "cluster.info"
	VerbStreamMove         = "stream.move"
	VerbNodeDrain          = "node.drain"
	VerbNodeUndrain        = "node.undrain"
	VerbNodeLeave          = "node.leave"
	VerbRecoveryWithdraw   = "recovery.withdraw"
	VerbRecoveryAcceptLoss = "recovery.accept-loss"
	VerbAttentionClear     = "attention.clear"
)

// AdminSubject is the subject of an admin verb.
func AdminSubject(verb string) string { return AdminPrefix + verb }

// HeartbeatSubject is where node publishes its Heartbeat.
func HeartbeatSubject(node string) string { return "brook.hb." + node }

// HeartbeatWildcard matches every node's heartbeat.
const HeartbeatWildcard = "brook.hb.*"

// AssignNoticeSubject is where the coordinator leader publishes an
// AssignNotice for node after a committed change that concerns it.
func AssignNoticeSubject(node string) string { return "brook.assign." + node }

// SealSubject is answered by the stream host node with SealReply.
func SealSubject(node string) string { return "brook.host." + node + ".seal" }

// SealBatchSubject is answered by the stream host node with a
// SealBatchReply: several seals in one request (SealBatch), so that a
// failover of thousands of streams sends one request per host and batch
// rather than one per copy.
func SealBatchSubject(node string) string { return "brook.host." + node + ".seals" }

// HostProbeSubject is answered by the stream host node with a liveness
// beat (a Heartbeat with Live set, no copies): the coordinator leader asks
// it before it expires the host by TTL (docs/failover.md). Only host node
// may subscribe to it, so no other client answers in its name, and a dead
// host's request gets "no responders".
func HostProbeSubject(node string) string { return "brook.host." + node + ".probe" }

// Stream data-plane subjects; only the stream's current owner subscribes,
// to all four at once (StreamOpWildcard).
func PublishSubject(stream string) string { return "brook.s." + stream + "." + OpPublish }
func FetchSubject(stream string) string   { return "brook.s." + stream + "." + OpFetch }
func CommitSubject(stream string) string  { return "brook.s." + stream + "." + OpCommit }

// The last tokens of the stream data-plane subjects.
const (
	OpPublish      = "pub"
	OpPublishBatch = "pubb"
	OpFetch        = "fetch"
	OpCommit       = "commit"
)

// StreamOpWildcard matches the four data-plane subjects of stream
// (publish, publish batch, fetch, commit) and nothing else of brook's: the
// owner's one subscription for them. StreamOp names which one a message
// came on. (The replication and owner-notice subjects have more tokens.)
func StreamOpWildcard(stream string) string { return "brook.s." + stream + ".*" }

// StreamOp is the last token of subject, or "" if it has no dot.
func StreamOp(subject string) string { return lastToken(subject) }

// PublishBatchSubject takes a publish batch (a frame.PubBatch, many records
// in one request) and answers a frame.PubReply once every record of it is
// confirmed, or an error reply like a publish's for a refusal of the whole
// batch.
func PublishBatchSubject(stream string) string { return "brook.s." + stream + "." + OpPublishBatch }

// Limits of a publish batch at the owner: more records, or a larger frame,
// is refused whole with CodePayloadTooLarge (a client splits its batches
// below them). Each record is also held to the host's limit of a single
// publish, refused on its own with CodePayloadTooLarge above it.
const (
	MaxPublishBatchRecords = 4096
	MaxPublishBatchBytes   = 8 << 20
)

// OwnerNoticeSubject is where node, having just become stream's owner,
// announces an OwnerNotice once it takes publishes. Node is the last token,
// so nats-server lets each host announce on its own subjects only.
// Clients retrying across a failover listen on OwnerNoticeWildcard to try
// again at once instead of at the end of their backoff; a notice is only a
// hint to retry, never trusted for anything else.
func OwnerNoticeSubject(stream, node string) string { return "brook.s." + stream + ".owner." + node }

// OwnerNoticeWildcard matches every host's OwnerNoticeSubject of stream.
func OwnerNoticeWildcard(stream string) string { return "brook.s." + stream + ".owner.*" }

// ReplicationSubject is where the follower node sends its replication
// requests for stream at epoch; only the owner at that epoch answers. The
// follower's node is the last token, so nats-server can let each host
// publish on its own subjects only, and the owner refuses a request whose
// body names another node.
func ReplicationSubject(stream string, epoch uint64, node string) string {
	return fmt.Sprintf("brook.s.%s.repl.%d.%s", stream, epoch, node)
}

// ReplicationWildcard matches every follower's ReplicationSubject of stream
// at epoch: the owner's subscription.
func ReplicationWildcard(stream string, epoch uint64) string {
	return fmt.Sprintf("brook.s.%s.repl.%d.*", stream, epoch)
}

// ReplicationNode is the node a ReplicationSubject names (its last token),
// or "" if subject has no dot.
func ReplicationNode(subject string) string { return lastToken(subject) }

// lastToken is the part of subject after its last dot, or "" if it has none.
func lastToken(subject string) string {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return ""
	}
	return subject[i+1:]
}

// HostReplSubject is where follower host follower sends owner host owner
// its one long poll for all of its idle copies there (frame.HostWait,
// answered with a frame.HostWake). The last token is the sender's node:
// with credentials, a host may publish only such subjects ending in its
// own node, and the owner refuses a body naming another.
func HostReplSubject(owner, follower string) string {
	return "brook.hostrepl." + owner + "." + follower
}

// HostReplWildcard matches every follower host's HostReplSubject of owner
// host owner: that host's subscription.
func HostReplWildcard(owner string) string { return "brook.hostrepl." + owner + ".*" }

// HostLeaveSubject is where the stream host node tells the coordinators it
// leaves (body NodeRef naming node, answered like the admin verb
// node.leave). Only host node may publish it.
func HostLeaveSubject(node string) string { return "brook.host." + node + ".leave" }

// HostLeaveWildcard matches every host's HostLeaveSubject; the coordinators
// subscribe to it in queue group AdminQueue.
const HostLeaveWildcard = "brook.host.*.leave"

// HostLeaveNode is the node a HostLeaveSubject names, if subject is one.
func HostLeaveNode(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "brook.host.")
	if !ok {
		return "", false
	}
	node, ok := strings.CutSuffix(rest, ".leave")
	if !ok || node == "" || strings.Contains(node, ".") {
		return "", false
	}
	return node, true
}

// Inbox prefixes (nats.CustomInboxPrefix) of brook's principals. Every
// principal subscribes only to its own inboxes (<prefix>.>), which is what
// nats-server allows it when brook runs with credentials (issue 13); the
// replies to its requests come there.
const (
	InboxClient      = "_INBOX.client"
	InboxAdmin       = "_INBOX.admin"
	InboxCoordinator = "_INBOX.coord"
	// InboxCoordinatorSys is the coordinators' system-account connection's.
	InboxCoordinatorSys = "_INBOX.coordsys"
	InboxAttention      = "_INBOX.attention"
)

// HostInbox is the inbox prefix of the stream host node.
func HostInbox(node string) string { return "_INBOX.host." + node }
