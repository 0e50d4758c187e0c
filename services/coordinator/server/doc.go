// Package server is one brook-coordinator process: a replica of the Raft
// state (package raftstore), the NATS endpoints every replica answers
// (admin verbs and assignment pulls, in queue group brook-coordinators), the
// liveness view built from heartbeats and disconnect advisories, and, on the
// Raft leader only, the control loop: controller.Plan's actions, one
// recovery.Worker per pending recovery, assignment notices and the owner
// balancer. Planned moves (stream.move, node.drain, the balancer;
// admin_move.go) run on the replica that decided them, each in the
// request's goroutine or, for the balancer, in its own goroutine of the
// worker group under the leader's context; s.mu guards the set of streams
// being moved, and no lock is held across a hand-off, a seal or a
// proposal. Heartbeats are noted as proof of life on their subscription's
// goroutine as they arrive and decoded in one goroutine of their own
// (reportLoop, ended by shutdown), so a long decode never delays the next
// beat's proof of life.
//
// # Locks and goroutines
//
// The package's locks are taken one at a time: none of Server.mu,
// Server.hbMu, hearing.mu and the liveness tracker's own lock (package
// liveness) is taken while another of them is held. One is held across a
// call that takes the NATS connection's own lock (under which nothing of
// this package is taken): Server.mu across QueueSubscribe and
// Unsubscribe (subscribe, at start; shutdown), which append a SUB or UNSUB
// to the connection's write buffer and, were that buffer full, write it to
// the socket. hearing.view and hearing.up read the connection (IsConnected,
// Stats, which wait for that lock while a write to a full socket holds it)
// before taking hearing.mu. A query's callbacks run under the state
// machine's read lock (controller.Losing in state.QueryControl, the
// balancer's up in controller.BalanceQuery) and take no lock of this
// package: they read the liveness view and the set of draining nodes as
// copied before the read. No lock of this package is held across a Raft
// proposal or read (whose log writes Dragonboat syncs; this package does no
// fsync of its own), a NATS request or a publish (a reply, a notice, a
// host's ask for a full report):
//
//   - Server.mu guards the recovery workers by stream (workers), the
//     planned moves this replica runs (the fields grouped in moves:
//     running, draining, backoff, seq), balancedAt, movesSeen, leading,
//     leaderSince, noticed and subs; closed is an atomic but is set under
//     it, so that serve adds no request to the handlers' WaitGroup, and
//     subscribe adds no subscription, once shutdown has begun. Holders
//     copy what they need and act after releasing it: announce takes the
//     version to notify and publishes after, balance copies the moves and
//     back-offs and reads the state after, startWorker only starts the
//     worker's goroutine under it.
//   - readFailing, lastFullPlan, lastSealedScan and sealed belong to the
//     control loop's goroutine and have no lock.
//   - Server.hbMu guards hbDec, the heartbeat decoder (each host's report
//     parts and copies); it is held for one Decode, by reportLoop. asked
//     (askFullReport's memory) belongs to reportLoop and has no lock.
//   - hearing.mu guards hearing's since and noted, written by the NATS
//     connect and reconnect callbacks and by stallWatch, read by each
//     control round (hearing.view).
//   - node.drain's drainMoves has a mutex of its own for its reply's lists.
//   - sealBatcher.mu guards the batcher's closed flag and its per-node
//     queues of seals (sealbatch.go); it is never held across a request.
//     next answers the queued seals shutting_down under it once the
//     batcher is closed: a send on a channel with room for the one
//     answer, which never blocks.
//   - waits (recovery.WaitLog) has a mutex of its own, taken by the
//     workers to count a repeated wait and by the control loop to log
//     the summary (flushWaits, every waitSummaryEvery, and shutdown
//     once more after the workers ended).
//
// Goroutines, who starts them and how they stop:
//
//   - reportLoop, started by Start on reqCtx once the Raft store is open
//     (every later failure of Start goes through shutdown): it decodes the heartbeats
//     onHeartbeat queued (at most maxQueuedReports; past that a beat is
//     dropped after its proof of life is noted) and publishes a host's ask
//     for a full report with no lock held. It ends when shutdown cancels
//     reqCtx, which waits for reportsDone.
//   - the control loop (controlLoop) and the stall watch (stallWatch),
//     started by Start on loopCtx, which shutdown cancels first and then
//     waits for both (loopDone, stallDone). While this replica leads, the
//     loop holds a leader context, a child of loopCtx, cancelled when it
//     loses leadership or ends.
//   - serveWhenReady, started by Start on loopCtx: it polls for a Raft
//     leader every 10 ms, subscribes the admin verbs, pulls and host leaves
//     and ends; or it ends with loopCtx. Nobody waits for it: subscribe
//     checks closed under Server.mu, so no subscription of it outlives
//     shutdown's Unsubscribe.
//   - a round's stream actions (executeAll): one goroutine per action, at
//     most maxConcurrentActions at once, under the leader context, each
//     proposal bounded by 5 s; the round waits for all of them. Node
//     actions run before them, in the loop's goroutine.
//   - recovery workers (startWorker): one per stream with a pending
//     recovery, kept in workers, on a child of the leader context; a
//     worker for a newer transition cancels the older one, losing
//     leadership and shutdown cancel all (stopWorkers). They are counted
//     by workerWG, which shutdown waits for once the control loop has
//     ended, so no worker is added after that wait begins. Each worker's
//     seals run in goroutines of its round, each bounded by its timeout;
//     the round returns when they answered, timed out, or were left out
//     (recovery.Worker.sealAll).
//   - seal batches (sealBatcher, the recovery workers' and moves'
//     Sealer): at most maxSealSenders (8) send goroutines per host with
//     seals queued or in flight, so up to 8 batches in flight per host,
//     each started by a seal that finds fewer running and ended when the
//     host's queue is empty. Each sends one batch request at a time, on
//     the batcher's context bounded by the latest deadline among the
//     batch's callers (at most maxSealBatchWait), and answers each caller
//     on a channel of one, so a caller that left never blocks it. When
//     no host answers the batch subject (an older host) and the state
//     does not count the node gone (a gone node's batch fails whole),
//     the send goroutine sends the batch's seals alone on .seal, a goroutine each
//     (at most maxSealBatch per send goroutine, so maxSealSenders x
//     maxSealBatch per host), and waits for them. Seals
//     wait in a queue of at most maxSealQueue per host (past it a seal
//     fails overloaded). Shutdown closes the batcher once the workers
//     and requests have ended: queued seals fail shutting_down, the batch
//     in flight is cancelled, and the goroutines are waited for.
//   - liveness probes before a TTL expiry (startProbe, from executeAll):
//     one goroutine per probed node at a time (probing, under mu), on the
//     leader context, bounded by its wait (controller.ProbeWait, at most
//     Options.ProbeTimeout) and then by the
//     expiry's 5 s proposal; counted by workerWG. Probing is read by each
//     round (probingNodes); no lock is held across the probe's request.
//   - balancer moves (balance, from the control loop): one goroutine per
//     move, within Balance.MaxMoves moves in flight (operators' moves
//     included), on the leader context bounded by requestTimeout, counted
//     by workerWG.
//   - admin requests, assignment pulls and host leaves: NATS delivers each
//     subscription's messages on a goroutine of that subscription; serve
//     hands each request to a goroutine of its own, counted by the
//     handlers' WaitGroup (and inflight; admitted by origin, clients' and
//     hosts' requests up to MaxInflight each), on a child of reqCtx bounded by
//     requestTimeout. In it the handler runs in one more goroutine, which
//     the request's goroutine always waits for, and noQuorum's watch
//     ends when the request's context does. A stream.move or node.drain
//     runs its moves (hand-off, seals, the move's own recovery worker,
//     moveState.Recover) in the request's goroutine; node.drain runs up to
//     maxDrainMoves of them at once in goroutines it waits for. The reply
//     is published with no lock held once the handler returns or, without
//     a quorum, at once (the request's goroutine then still waits for the
//     handler, which ends with its context).
//   - heartbeats: onHeartbeat runs on the heartbeat subscription's
//     goroutine, notes the proof of life and queues the beat without
//     blocking. Disconnect advisories: onDisconnect runs on the system
//     connection's subscription goroutine (ended by closing that
//     connection) and arms a time.AfterFunc of DisconnectGrace to wake the
//     control loop; the timer is never stopped, fires once, and its poke
//     is a send on the buffered kick channel that never blocks, so it is
//     harmless after shutdown.
//   - the NATS connect and reconnect callbacks run on the client's
//     callback goroutine (hearing.up) and end with the connection.
//   - the connection watch (bus, package connwatch), started by Start on
//     reqCtx once nc is made: it asks nc whether it is connected
//     every connwatch.Interval, so that Ready (/healthz) answers from
//     memory and never waits for the connection's lock. It ends with
//     reqCtx, after a question in flight. connwatch.Losses, started with
//     it on reqCtx, tells it of each loss of nc as nats.go makes it, and
//     ends with reqCtx.
//   - the health endpoint's Serve goroutine, ended by shutdown's
//     http.Server.Shutdown; the metrics callback runs on the meter
//     reader's goroutine and does nothing once closed is set.
//
// Shutdown (Close; Start too when connecting or listening fails) runs its
// steps in order, each in a goroutine of its own bounded by its limit
// (shutdownLimits) and by the context given to Close; a step past its limit
// is logged and left running, since the process is stopping: cancel loopCtx
// and wait for the control loop and the stall watch; cancel the recovery
// workers and wait for workerWG (the workers and the balancer's moves,
// whose leader context ended with the loop); unsubscribe; let requests in
// flight finish (graceful only), then cancel reqCtx and wait for their
// replies; close the seal batcher; wait for reportLoop; hand leadership over (graceful only); close
// both NATS connections, the health endpoint and the Raft node host.
package server
