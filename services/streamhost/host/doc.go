// Package host is brook's stream host: it holds the copies placed on one
// node in one Pebble database (package streamlog) and, for each copy, plays
// the role its latest applied assignment gives it.
//
// An owner subscribes to the stream's data-plane subjects (publish,
// publish batch, fetch, commit: one wildcard subscription) and serves its
// epoch's replication through the host's link (with natsLink, a second
// subscription). Publishes are handed to one appender goroutine per
// copy that writes whatever is queued in one Append (group commit); a record
// is confirmed once W copies hold it durably, the owner included, with
// W = policy.StampW(policy, E). A publish batch (brook.s.<stream>.pubb,
// frame.PubBatch) goes through the same appender: its records join the
// same Append, each with its own producer sequence, and the batch waits as
// one waiter at its highest offset for one reply (pubbatch.go). Followers
// tell the owner what they hold by asking for more: a replication request
// from record tail T says the follower holds everything below T durably.
// The owner serves them what it has written, durable or still in its group commit
// (streamlog.Copy.ReadWritten), so that its own fsync and a follower's run
// at the same time rather than one after the other; a follower may
// therefore hold a record before the owner does. The confirmed watermark
// is the owner's durable tail capped by the (W-1)-th highest of the
// followers' acked tails (confirmedWatermark): the owner is always one of
// the W copies, and followers alone confirm nothing. Readers only ever
// receive records below the watermark, so only durable ones. The confirm
// bookkeeping is a pure type, confirmer (confirm.go), whose methods take
// what happened and return the replies to send.
//
// A follower runs one worker per copy that pulls from the owner at the
// assignment's epoch, applies records and cursor events at the owner's
// offsets durably, and only then asks again. After a request of the whole
// idle wait that brought nothing the worker sleeps on the host's one host wait to the owner's
// host (idlewait.go) until the owner's host names its copy (it has
// something to ask for) or the host wait fails, and then asks again on
// its own link to the owner: the host wait only decides when a follower asks.
//
// Followers, their hosts and owners talk through the host's replication
// link (replLink, transport.go): a follower's requests and standalone
// acks, its host's host waits, and the owner's side that serves both.
// The link carries encoded frames and the authenticated sender, and
// knows nothing of what they mean: every rule (what an ack counts, when a
// follower asks again, what a host wait is answered with) is in the
// follower's, the owner's and the host waits' files. It has two
// implementations, the only files of the package that know how
// replication travels: natsLink (link_nats.go), over the host's NATS
// connection, and the direct link (link_direct.go, with
// Config.ReplListener), which carries followers' requests and acks and
// their answers on one mutual-TLS connection per pair of hosts, set up by
// a hello over the bus that binds each host's certificate to its node,
// and falls back to natsLink wherever no connection is up. The same
// listener takes clients' client links (link_client.go): publish batches
// on a client's own TLS connection, handed to the stream's owner as the
// bus would hand them, their replies sent back on it. Host waits, single
// publishes, fetches, commits, seals, probes and assignments stay on
// NATS.
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
// Lock order: replica.mu, then owner.mu, then the store's own locks
// (streamlog.Copy's), then hostWaiters.mu, then waitSet.mu (nothing holding
// them takes another lock, and waitSet.mu is also taken alone; the store's
// OnChange, called with a copy's lock held, takes neither while the host
// runs: it hands the change to the marking goroutine without waiting, since
// a copy's lock held while waiting for them stopped the store's group
// commits);
// owner.inMu, owner.track, idleWaits.mu and ownerIndex.mu are taken alone. No lock of this package is
// held across an fsync, a NATS request or a publish:
//
//   - replica.mu serializes a copy's role changes, seals and assignment
//     applies. A seal holds it across the store's Seal (its synced write)
//     and across stopping the role, which waits for the role's goroutines;
//     none of them takes replica.mu.
//   - owner.mu guards the fields grouped in owner.mu: the confirmer, the
//     watermark's wake-up channel, the expiry timer and the log-once
//     maps; owner.track, taken alone, the stopped flag that ends the
//     role's request goroutines (goTracked). Every path that changes the confirmer (an append
//     made durable, a follower's ack, an assignment update, an expiry, a
//     failure) builds its replies under it and sends them after releasing
//     it (owner.send). The appender calls Append (which waits for the
//     fsync) without it. A publish batch's results are written by the
//     appender under it and read only once its waiter is confirmed
//     (pubbatch.go).
//   - owner.inMu guards closing the intake channel against a publish
//     callback sending on it; a callback waiting on a full channel gives
//     up when the intake stops (owner.inStop), so closing it never waits
//     for the appender, nor the appender's wait for the disk.
//
// Goroutines, who starts them and how they stop:
//
//   - per owner, the appender (started by startOwner; ends when stop
//     closes the intake channel and cancels the role's context, which
//     also ends an Append waiting for its group commit); each replication,
//     fetch or long-poll commit request in a request goroutine of the
//     owner within the host's budget for its kind (goRequest; a follower's
//     standalone ack is counted in the replication link's goroutine
//     instead, the NATS subscription's callback with natsLink, the
//     connection's reader with the direct link: a digest read and
//     owner.mu, never a wait), run on the host's pool; tracked by the
//     owner's WaitGroup, which stop waits for, and ended by the role's
//     context; the expiry timer's callback takes owner.mu and sends after
//     it.
//   - the host's pool (pool.go) runs the jobs of owners' requests, of the
//     request group (seals, hand-offs) and of the appliers: on an idle
//     worker if one waits, else on a new one, which after its job waits
//     workerIdle for another (so stacks grown by one job serve the next,
//     of any owner). Each job is counted by whoever started it; the
//     workers end after workerIdle idle, or when Run's end closes the pool
//     (after the request group and the roles have stopped).
//   - per seal request, a goroutine of the host's request group within
//     the seals' budget.
//   - per seal batch (seals.go), one goroutine of the request group that
//     holds no budget slot (it runs even when every seal was refused),
//     and per admitted seal of it a goroutine of the request group within
//     the seals' budget; the batch's goroutine collects their answers and
//     replies once all have ended or the batch's timeout_ms has passed
//     (those still running are answered timeout and go on alone, holding
//     their slots until they end; shutdown waits for them as for any
//     request goroutine).
//   - with a direct link (link_direct.go), its accept loop (started by
//     Run in its background group, ended by the background context's end,
//     which closes the listener and every connection and waits for the
//     rest): per accepted connection a goroutine until it is set up, per
//     owner host at most one dial at a time, and per connection a reader
//     and a writer, which end when the connection closes. directLink.mu,
//     directLink.routes (read once per frame from a follower host) and a
//     connection's write and pending locks are each taken with no other
//     lock held; no lock is held across a network call.
//     A client's connection (link_client.go) has the same reader and
//     writer; its reader hands each publish batch to the owner's intake
//     callback, which may wait for room in the intake queue and so holds
//     up that connection alone. The client side's routes, connections
//     and hellos locks (clientSide) take no other lock; a reply to a
//     client (replyToClient) may take the connections' lock under
//     owner.inMu's read lock, when enqueue refuses a publish.
//   - the marking goroutine (hostWaiters.markLoop, started by Run): it
//     marks the store's changes in the idle sets (markQueue); ended by
//     hostWaiters.close, which waits for it, as Run's shutdown begins (or
//     on any earlier return of Run).
//   - per follower, its worker (startFollower; ends on stop, which cancels
//     it and waits, or when the store closes). Asleep on a host wait it
//     deregisters when its context ends. Beside it its syncer, which waits
//     for each written batch to be durable and sends the standalone ack
//     (a publish, which can wait for the connection: never on the store's
//     committer or completeLoop goroutines, which every copy's writes on
//     the host wait for; TestStuckAckPublishHoldsNoGroupCommit);
//     the worker closes its queue when it returns and waits for it before
//     closing done, so stop waits for both.
//   - per owner node with sleeping follower copies, the host-wait loop
//     (idlewait.go, started by the first copy to sleep there): one host
//     wait at a time; it ends when no copy sleeps there any more (every
//     answer or failure wakes some) or the host's background context ends;
//     Run waits for these after stopping the roles (idleWaits.wg). Copies
//     joining while one is in flight start at most one timer per host
//     wait (peerWait.grew) whose callback, at most 100 ms later, only
//     cancels that host wait (a no-op once it ended) and takes no lock.
//   - per follower host's host wait at this host, one goroutine of the
//     host's request group within the replication budget (onHostWait,
//     which applies the host wait to the sender's set, waitSet, under
//     hostWaiters.mu and waitSet.mu before it starts it); each pass takes
//     the copies to look at under waitSet.mu, looks their owners up under
//     ownerIndex.mu, then takes owner.mu alone once per copy to check it
//     and, on the first pass, keep its ack live (owner.hostWaitQuiet), and
//     it ends when it answers, when a newer host wait of the same host
//     replaces it, or when Run closes the parked waits (answered
//     shutting_down) before it closes the request group.
//   - per seal, a prebuild of the duplicate window in the host's
//     background group (ends when done or at shutdown, which cancels it).
//   - per pull (and per batch of create notices), up to
//     maxConcurrentApplies goroutines that apply one stream each under its
//     replica.mu (applies); the pull loop waits for them all before it
//     goes on, so pulls never overlap. Per recovery notice that carries
//     its assignment, one goroutine of the request group applies it under
//     the replica's mu (applyNoticed). A seal of the same copy waits for
//     the apply, or the apply for the seal; a seal batch logs one line
//     for all its seals.
//   - the host's pull, heartbeat, liveness and retention loops in the same
//     background group, and the connection watch (Host.bus, package
//     connwatch, asking through mainWatch): every 500 ms it asks the main
//     connection whether it is up, so that Health (/healthz) answers from
//     memory; with a beat connection of their own (Config.BeatConn) every
//     50 ms, and it also keeps mainSeen, the main connection's state the
//     beats name, current. Neither reads the main connection's lock,
//     which a write to a full socket or a connection attempt holds; the
//     watch alone waits for it. A goroutine of the background group
//     (connwatch.Losses) tells the watch of each loss of the main
//     connection as nats.go makes it; the disconnect handler
//     (Disconnected, on the callback goroutine, in order with
//     Reconnected) marks mainSeen down. An answer read before either is
//     dropped.
//   - the coordinator leader's liveness probe (onProbe) is answered on
//     its subscription's goroutine with a liveness beat: it reads mainSeen
//     (or the shared connection's state) and the store's failure, holds no
//     lock of the host's. A reconnect's beat (Reconnected) goes out the
//     same way on the NATS client's callback goroutine.
//   - the store's committer, completeLoop and cursor-sync goroutines
//     belong to streamlog and end when the store closes.
//   - a planned move's hand-off (move.go) runs in the request group and
//     polls the target's ack; the owner's own mu (owner.mu.move) holds its
//     intake and counts its writes in flight, so publishes take no
//     host-wide lock, and a hold's expiry is a timer.
//
// Shutdown answers the parked host waits and stops the marking goroutine
// (hostWaiters.close), closes the request group, cancels and waits for the
// background group, then stops every role (each stop waits for its
// goroutines), waits for the idle copies' loops, closes the pool (its idle
// workers end; every job has ended by then), then closes the store.
package host
