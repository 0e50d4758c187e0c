// Package server is the brook-attention service: it judges the attention
// list from what its watcher follows and answers it on NATS
// (brook.attention.list) and HTTP (/attention as JSON, / as a page, /healthz).
//
// The service keeps nothing durable. The judge's memory (since when each
// entry is listed, how long each follower has stood still) lives in the
// process and starts afresh on restart.
//
// # Locks and goroutines
//
// This package runs the service's goroutines; package watch keeps the view
// they share, and package judge has no lock and starts no goroutine
// (judge.Judge is a pure function of its arguments and of the Memory it is
// given).
//
// Lock order: Service.mu, then watch.Watcher's mu (List holds the one
// across Snapshot; Ready takes Watcher.mu alone, in Pulled), then metrics.mu (List records the judging's counts).
// Watcher.mu is also taken alone, by the watcher's callbacks and pulls,
// and metrics.mu alone by the gauge's callback. Snapshot reads the NATS
// connection's state (IsConnected, Stats: the connection's own lock)
// before it takes Watcher.mu, but under Service.mu when List calls it; at
// start watch.Run reads Stats once under Watcher.mu. The service does no
// fsync, and no lock is held across a NATS request, a flush or a reply:
//
//   - Service.mu guards the judge's Memory (not safe for concurrent use)
//     and listed, the last list (for logging what appears and clears). It
//     is held for one judging (Snapshot, judge.Judge, the log, the
//     metrics), so judgings run in the order of their clocks and the
//     memory never sees time go back; the reply is encoded and sent after.
//   - Watcher.mu guards the view: the stream list with streamsAt,
//     listedAt and lowerStreams; the cluster info with clusterAt and
//     lowerCluster; noticed; the heartbeats (hbs, listDue), the report
//     assembly (parts, reports) and the decoder (hbDec); listeningSince
//     and reconnects. A pull sends its requests with no lock held and
//     applies each reply under it (listCurrent, applyCluster,
//     applyStreams; applyChanges builds the changed list before it takes
//     the lock: only the pulls replace the list). A heartbeat is decoded under it and then applied
//     under it; Snapshot lists under it the copies of the nodes with a
//     report applied since the last Snapshot (heartbeatsLocked).
//   - metrics.mu guards the counts of the latest judging by kind.
//
// Goroutines, who starts them and how they stop:
//
//   - Service.Run runs in its caller's goroutine (cmd/brook-attention
//     starts one): it subscribes brook.attention.list in queue group
//     ListQueue, starts watch.Watcher.Run in one goroutine on a child of
//     its context, and judges every Refresh so that since-when and follower
//     tracks stay current. When its context ends it waits for the
//     watcher and returns; when the watcher fails it returns the error,
//     and its deferred cancel has nothing left to stop. It unsubscribes as
//     it returns.
//   - the connection watch (Service.bus, package connwatch), started by
//     Service.Run on the same child context and waited for as Run
//     returns: it asks the NATS connection whether it is up every
//     connwatch.Interval, so that Ready (/healthz, the page's reason)
//     answers from memory, never waiting for the connection's lock; and
//     connwatch.Losses, started and waited for alike, which tells it of
//     each loss of the connection as nats.go makes it.
//   - watch.Watcher.Run subscribes to heartbeats and change notices,
//     flushes, and pulls at once, then on every Refresh and on every
//     notice newer than what it holds, pulls at least minPullGap apart
//     and pauses three times a pull's duration after it, at most 2 s
//     (pullGap); each
//     request is bounded by RequestTimeout
//     and by its context. It ends with its context and unsubscribes.
//   - NATS delivers each subscription's messages on a goroutine of that
//     subscription: onList (judges under Service.mu, then replies),
//     the watcher's onHeartbeat (under Watcher.mu) and onNotice (asks for
//     a pull with a send that never blocks). They end with their
//     subscriptions; a callback running as Run unsubscribes finishes on its
//     own, and a reply it sends after the connection closed fails and is
//     logged.
//   - HTTP requests (Handler) run on the goroutines of the caller's
//     http.Server, call List and Ready, and stop with its Shutdown.
//   - the gauge's callback runs on the meter reader's goroutine.
//
// cmd/brook-attention's serve owns the connection, the HTTP server and
// Run's goroutine: when its context ends (SIGTERM, interrupt), Run fails,
// or the HTTP server fails (which cancels Run), it waits for Run, shuts
// the HTTP server down (5 s), flushes and closes the connection.
package server
