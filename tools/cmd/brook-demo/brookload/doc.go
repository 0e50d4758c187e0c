// Package brookload is the brook side of the one-command demo (brook-demo)
// and of the cluster bench's brook target (brook-bench): records that name
// themselves, a publisher that stays exactly-once across a failover, the
// readers that read a stream back, and the node operations around a kill
// (SIGKILL the owner, restart it, wait until it rejoins as a follower).
//
// # Why the publisher resolves ambiguous publishes itself
//
// A publish is tagged with a producer id and sequence, so the owner answers
// a retry with the first write's offset. That window lives in the owner's
// memory only: it does not move with a failover. A publish sent to an owner
// that dies may already sit in the log of the copy that gets promoted (it
// was replicated, but not confirmed before the kill); retried on the new
// owner it would be written a second time, at another offset.
//
// So when an attempt ends without an answer and the stream has moved to a
// newer epoch since the attempt was sent, the publisher first reads the new
// owner's log from the lowest offset the record could have (one past the
// highest offset confirmed before it was sent) up to the new owner's tail,
// and reports the record's offset if it is there. The new owner took over
// at its own tail and only appends what it receives itself, so a record that
// is not below that tail is not in the log, and the retry is safe. When the
// owner has not changed, the retry reaches the same owner, whose window
// covers it.
//
// Waiting for a lost owner's reply would stall every publisher for a whole
// request timeout, so a probe watches for that: while an attempt is
// outstanding for longer than a moment, the publisher asks the owner for
// its epoch (a fetch at the latest position, which reads nothing); when no
// one answers or a newer epoch does, the attempts sent to the older owner
// are abandoned and resolved as above.
package brookload
