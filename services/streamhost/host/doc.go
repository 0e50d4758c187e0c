// Package host is brook's stream host: it holds the copies placed on one
// node in one Pebble database (package streamlog) and, for each copy, plays
// the role its latest applied assignment gives it.
//
// An owner subscribes to the stream's publish, fetch, commit and
// replication subjects. Publishes are handed to one appender goroutine per
// copy that writes whatever is queued in one Append (group commit); a record
// is confirmed once W copies hold it durably, the owner included, with
// W = policy.StampW(policy, E). A publish batch (brook.s.<stream>.pubb,
// frame.PubBatch) goes through the same appender: its records join the
// same Append, each with its own producer sequence, and the batch waits as
// one waiter at its highest offset for one reply (pubbatch.go). Followers tell the owner what they hold by
// asking for more: a replication request from record tail T says the
// follower holds everything below T durably. The confirmed watermark is the
// W-th highest of the owner's durable tail and the followers' acked tails,
// and readers only ever receive records below it.
//
// A follower runs one worker per copy that pulls from the owner at the
// assignment's epoch, applies records and cursor events at the owner's
// offsets durably, and only then asks again.
//
// Seals fence a copy in storage first and then stop whatever role the copy
// played at an older epoch. Assignments are pulled from the coordinators
// (on start, on a notice of a newer version and every 5s) and applied in
// version order: a copy whose assignment moves to a newer epoch is first cut
// onto that epoch's history, then begins the epoch (which releases a seal at
// or below it), and only then takes its role at its own tails.
//
// A follower's request carries its running digest at its record tail; the
// owner counts the request as an ack, and serves it, only if that digest is
// its own digest there (log matching), and answers diverged otherwise.
//
// Duplicate suppression (Brook-Producer and Brook-Seq headers) is a bounded
// window in the owner's memory. The producer and sequence are stored with
// each record (package envelope, stripped again for readers), so they
// replicate, and an owner rebuilds its window from the newest records of its
// log when it takes the role: a retry that reaches a new owner after a
// failover is answered with the first write's offset. The window belongs to
// the copy, not to the role (window.go): the owner records its writes, a
// follower the producer sequences of what it applies, and a promotion
// takes the copy's window as long as it was kept at the copy's current
// tail and digest; a copy without one (after a restart or a history cut)
// has it built by its next seal, in the background, and only as a last
// resort by the promotion itself.
//
// # Locks and goroutines
//
// Each copy's replica.mu serializes its role changes, seals and applies;
// an owner's mu guards its confirm bookkeeping (replies are built under it
// and sent after; a publish batch's results are written by the appender
// under it and only read once its waiter is confirmed), and no lock is held across a NATS request or an fsync
// other than the store's own. Goroutines: per owner, the appender (ends on
// stop); per follower, its worker (ends on stop); per seal, a prebuild of
// the duplicate window in the host's background group (ends when done or
// at shutdown, which cancels it); the host's pull, heartbeat, liveness and
// retention loops in the same group; request handlers in the host's
// request group (seals, fetch waits, replication), each bounded by its
// budget. Shutdown closes the request group, cancels and waits for the
// background group, then stops every role.
package host
