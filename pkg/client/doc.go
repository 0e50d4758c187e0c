// Package client is the Go client of brook: publish records to a stream
// (synchronously or through a bounded window of outstanding confirms), fetch
// them, consume them with a durable cursor, and run the admin verbs of the
// coordinators.
//
// Admin writes are repeated only when the answer proves they were not
// applied (no responders, unavailable, overloaded). One answered
// outcome_unknown (its proposal timed out and may yet commit) or timed
// out here goes back to the caller, who reads the state before repeating
// it.
//
// # Routing and failover
//
// Only a stream's current owner subscribes to its subjects, so NATS routes
// every request to the owner and the client needs no topology. While a
// stream fails over there is briefly no owner (nats.ErrNoResponders), or a
// host answers not_owner, sealed, shutting_down, recovering or overloaded, or a request
// gets no reply because the owner died holding it. A batched (or async)
// publish's request timeout and probe delay count from when nats.go took
// its batch into the connection's buffer, not from when it was made: with
// thousands of requests at once the wait for the connection's lock is the
// client's own, and says nothing about the owner (a single request, and a
// fetch or commit, still counts it). A stream whose
// assignment holds fewer copies than its min_copies answers publishes
// not_enough_copies until placement adds copies back; that is retried the
// same way (nothing was confirmed). A publish that waits
// longer than the probe delay makes the client ask who serves the stream,
// with a fetch that reads nothing. The probe delay is WithOwnerProbe
// (250ms by default), or longer while the client's confirms take longer:
// the mean round trip of its recent confirms plus four mean deviations (as
// TCP sets its retransmission timeout), at most the request timeout, and
// only while confirms keep arriving within it, so that a burst to thousands
// of busy but live owners is not probed for waiting its turn (see
// confirmrtt.go); once an owner at a
// newer epoch than the one the attempt reached answers, the attempt is
// abandoned (ErrOwnerLost) instead of waiting out the request timeout (see
// ownerwatch.go for how the owner an attempt reached is bounded); an
// attempt with a producer id (WithProducer) is abandoned once an owner at a
// newer epoch than the client knew when it sent the attempt answers, as its
// retry cannot be written twice. It asks every 100 ms; while it hears the
// stream's new-owner notices (which have it ask at once) and finds a live
// owner that has not been replaced, at waits doubling up to 800 ms, back to
// 100 ms once a probe finds nobody serving or gets no answer; such probes
// too double, up to 1 s, once the oldest attempt has waited a second past
// the probe delay and the notices are known to be heard (the server took
// the subscription, and the connection has not reconnected since). An
// abandoned attempt is retried at once: an owner that serves answered the
// probe. The client retries the other failures of such a request with a
// bounded exponential backoff with jitter, bounded by the caller's context
// and by the retry limits of the Client (see WithRetry); after a second of retries, one that found nobody
// serving (no responders, or a host that is not the owner) waits up to 1 s
// instead while the notices are known to be heard, as the new owner's
// notice ends the wait at once (an owner that comes back without a notice,
// having only reconnected, is met up to 1 s later).
// While it retries it asks a coordinator (admin stream.info) about the
// stream, at the first retry that follows an attempt answered or refused
// (an attempt that merely timed out reached a host serving the stream,
// which the coordinators cannot add to) and then after 250 ms, 500 ms, 1 s and every
// 2 s until a coordinator says the stream is recovering or waiting, then
// every 8 s (so the thousands of publishers of a mass failover do not flood
// the coordinators recovering their streams: the failover's end comes as
// the new owner's notice), so a caller that runs out of
// patience gets ErrRecovering ("the stream is failing over; retry later")
// when the stream was recovering or waiting at the last answered check
// (up to 8 s old, longer if later checks went unanswered), and ErrNoSuchStream when the stream does not exist (at once when
// it did not exist at the first retry, up to 8 s late when it was deleted
// while failing over). It asks only before a retry: once the
// limits have run out it gives up without another request, so with
// WithRetry(1, 0) a failed attempt is the
// only request made (and ErrRecovering then needs the host's recovering
// answer). Stats counts the requests by kind (publish attempts, retries of
// stream requests and of admin requests apart, probes, stream.info), the
// stream requests' retries by why the attempt before failed (no
// responders, timeout, abandoned for a newer owner, other) and the owner
// notices heard. A request the connection did not send is retried under
// the same limits: one its client link connection refused as it closed,
// and one the NATS connection refused while it reconnects because its
// reconnect buffer was full (nats.ErrReconnectBufExceeded; with
// nats.ReconnectBufSize(-1) in WithNATSOptions, every publish during a
// reconnect is refused so and retried, up to WithRetry's limits). A retry
// that comes after Client.Close began is not made: its request ends with
// ErrClosed wrapping the last attempt's error (a timed-out publish's
// record may have been written). A Client is not to be used after Close:
// on a connection the caller owns (New), which Close leaves open, a
// request begun then may still make its first attempt.
//
// # Batching
//
// Publishes to one stream are gathered into batches (WithBatching), as
// Kafka's producer does: concurrent Publish calls on one Client and an
// AsyncPublisher's publishes alike join the stream's open batch, which goes
// out as one request (wire.PublishBatchSubject, a frame.PubBatch) when it
// is full (records or bytes), DefaultLinger (1ms) after its first record,
// on Close or AsyncPublisher.Flush, or as soon as it holds more records
// than the stream has in flight and as many publishes came since the last
// batch went as the stream's replies since then released records,
// whichever comes first: closed-loop publishers released by one reply
// travel together in the next batch, instead of the first one back going
// alone (batch.go, dueLocked). The owner writes a batch in one group commit and answers once for
// all of its records; each record still has its own confirm (or error) and
// its own producer sequence. A batch refused whole, timed out or lost in a
// failover is retried record by record under the rules below, each retry
// joining a later batch, so the owner's duplicate suppression stays exact
// per record. Batches leave through one queue per Client (sendqueue.go):
// one goroutine at a time takes the connection's lock to send them, in the
// order they were made, never holding a batcher's lock, so a record's
// confirm never waits for another batch's send, and a mass failover's
// thousands of batches do not queue for the connection's lock one
// goroutine each. Each batcher holds one reply subscription; Close sends the
// open batches, and each batcher's subscription ends with its last batch
// in flight (on a connection New was given too, which Close leaves open).
// BatchStats counts the batches sent and their records.
// WithBatching(0, 0, 0) publishes every record on its own.
//
// # The client link
//
// With WithDirectLink(true), a stream's batches go on a TLS connection of
// the client's own to the owner's host (link.go) instead of through a
// nats-server, once the owner, asked over the bus, named its host's
// address and certificate and the client connected; one connection per
// owner host serves every stream owned there. Everything else about a
// batch is the same: its reply subject, its reply, its records' confirms,
// retries and producer sequences. The stream's batches go over the bus
// until its connection is up, whenever it closes (the batches in flight
// on it fail at once, rather than waiting out their timeout, and are
// retried, as after a reconnect), and for a second
// after any batch on it that was not confirmed whole, after which the
// client asks the owner again over the bus. LinkedBatches counts the
// batches sent on it. A batch is not held back while the way changes, so
// the first batch on the link may reach the owner before the last one
// sent on the bus, and after trouble a batch on the bus before one still
// on the link: the owner then writes them in that order. Each record's
// confirm, offset and producer sequence stay exact (duplicate
// suppression is by sequence, not by order), as for a retried batch.
// Fetches of a stream go on its connection too while a batch was
// confirmed whole on it in the last second (at most two at a time per
// connection), and over the bus otherwise, or when the connection closes
// first or its host no longer serves the stream (LinkedFetches counts
// those answered on it); a client that only reads a stream reads it over
// the bus.
//
// # Delivery guarantees
//
// Publishing is at-least-once. A publish is reported confirmed only when the
// owner replied with a wire.PublishConfirm, which it sends once W copies
// hold the record durably. A publish that the owner could not confirm in
// time is returned as a *wire.Error with code wire.CodeConfirmTimeout and is
// not retried: the record may or may not survive, and the caller decides.
//
// Every confirm is true whatever its epoch. A confirm at epoch e can
// arrive after a newer epoch already serves the stream: a follower's
// acknowledgement sent before the follower was sealed for the failover may
// reach the old owner after the new owner started, and the old owner then
// confirms a record it had written before the seal. Such a record is below
// the new epoch's history start, on the copy the failover promoted, at the
// confirmed offset, and stays there. A replaced owner never confirms a
// record at or past that start (any W copies of its epoch include a sealed
// one, and a sealed copy acknowledges nothing of an older epoch). With the
// owner probe on (WithOwnerProbe) such a late confirm usually finds its
// attempt already abandoned and the publish retried; with it off it is
// returned like any other. An operator's recovery.accept-loss seals
// nothing and waives this promise, as it waives the promise of the
// confirm itself.
//
// A retried publish can be written twice: if the first attempt was written
// and confirmed but its reply was lost (the owner failed over or the request
// timed out), the retry appends the record again at a later offset. To
// suppress such duplicates, give the publish a producer id and a sequence
// number (WithProducer): the owner remembers recent sequences of each
// producer within a window and answers a repeat with the first write's
// offset (wire.PublishConfirm.Duplicate) instead of writing it again.
//
// Reading is at-least-once too. A Consumer commits its durable cursor
// periodically and on Close; after a crash, or after a failover onto a copy
// that holds fewer cursor commits, it receives some records again.
//
// A reader only ever receives confirmed records, and no position it is
// given (a fetch reply's Next, a "latest" start, a cursor's position)
// points past the confirmed watermark of the owner that answered, so a
// failover that cuts an old owner's unconfirmed records never makes a
// reader skip the records a new owner confirms at those offsets (right
// after a failover, positions up to the new owner's history start are
// settled too, so a resuming reader keeps its cursor). Right
// after a failover the new owner's watermark can be below a position the
// old owner gave; a cursor commit there is held by the owner until the
// watermark passes it (or answered recovering, which the client retries).
//
// # Streams of one name
//
// A stream deleted and created again under its name is another stream,
// with a new id and offsets starting at 0. By default a Client pins each
// stream name to the id it first meets (see pins.go and
// WithStreamPinning) and names it on every publish, fetch and cursor
// commit, so it never reads, writes or commits in another stream of the
// name: such a request fails with ErrStreamReplaced (which also carries
// the host's not_found), and neither its records nor its confirms are
// returned. Unpin, CreateStream and DeleteStream move the pin on.
//
// # Errors
//
// Error replies of the services are decoded into *wire.Error, so
// errors.As(err, &werr) and wire.CodeOf(err) work on every error this
// package returns.
//
// # Locks and goroutines
//
// The package's locks are taken in one order: AsyncPublisher.mu or
// Client.batchMu (dropIdleBatchers, which only tries each batcher's lock
// and skips a busy one), then batcher.mu, then Client.pinMu,
// Client.watchMu (then ownerWatch.mu) or sendQueue.mu; no other two are
// ever held together. clientLink.mu is taken last, under batcher.mu
// (route) or Client.batchMu (register), and takes no other lock; a
// hostConn's queue lock (linkconn.Queue) is taken alone. notices.mu and
// confirmRTT.mu are always taken alone. No lock is held across a request, a publish or a flush (the
// sendQueue's drain calls PublishMsg with its lock released), nor across
// a channel operation that can block (kicks and sync results go on
// buffered channels; records' done callbacks, abandon functions and
// Future results run after the locks are released, and a window slot is
// freed after AsyncPublisher.mu). Two locks are held across a call that
// takes the NATS connection's own lock, which writes the connection's
// buffer to the socket when it is full: Client.batchMu across MaxPayload
// and Subscribe when batcherFor makes a stream's batcher. Nothing of this
// package runs under the connection's lock, so it delays the callers
// behind it but cannot deadlock. notices.mu is not held across any NATS
// call: awaitOwner subscribes after releasing it (a caller that joins an
// entry whose subscription is being made waits, holding no lock, until it
// has gone out), and the idle drop unsubscribes after it:
//
//   - AsyncPublisher.mu guards nextID, pend, outstanding, idle and closed.
//     PublishAsync queues a first attempt (itself or through its batcher)
//     under it, so first attempts go out in call order; sent and take
//     start or stop an attempt's timer, reconnect hook and owner watch
//     under it.
//   - batcher.mu guards the open batch, openID, nextID, flights,
//     inFlight, returning and closed. A batch is pushed on the sendQueue under it (sendLocked),
//     which keeps a stream's batches in order; flight.ended and
//     pending.ended are atomics set under it and read by the goroutine
//     that drains the queue.
//   - Client.batchMu guards batchers, batchPruneAt and
//     batcherIdle, and closing is set under it (an atomic, which the
//     retrier reads without it); batcher.mu also guards idle, and a batcher's holds (an
//     atomic) goes up only under Client.batchMu and down under
//     batcher.mu, so dropIdleBatchers, holding both, sees a hold it must
//     spare; Client.pinMu guards pins; Client.watchMu guards watches and
//     watchPruneAt (pruning takes each watch's mu under it).
//   - ownerWatch.mu guards attempts, epoch, streamID, running, idle and
//     dropped; it is held for updates only, never across a probe.
//   - sendQueue.mu guards queue, spare and sending; it is released while
//     PublishMsg runs.
//   - notices.mu guards subs, shared, sharedPending, sharedHeard and
//     sharedSent, and each noticeSub's sub, heard, users, next, seq and
//     idle (sub and heard are set once the subscription made after the
//     entry's insertion is through; sent is set once, at the insertion);
//     held is an atomic copy of
//     len(subs), written under it, so that noticeMark and noticesHeard
//     skip the lock while no notice subscription is held.
//   - confirmRTT.mu guards the round-trip estimate. Stats and heard.ok
//     are atomics. A Consumer has no lock: it is for one goroutine at a
//     time.
//
// The goroutines the package starts, and how each ends:
//
//   - an owner watch (ownerWatch.run), one per stream with attempts in
//     flight, started by watchAttemptSeen for the first of them: it holds
//     the stream's notice subscription and probes (a fetch bounded by
//     probeTimeout) with no lock held, and ends when no attempt is left;
//     each attempt ends with its reply or its request timeout;
//   - drainRest, started by the sendQueue's drain when more was pushed
//     while it sent, at most one at a time; it ends once the queue is
//     empty;
//   - an AsyncPublisher's retry of a publish whose first attempt failed,
//     at most Window per publisher (the publish holds its slot until it
//     completes), bounded by the retry limits and by the publisher's
//     context, which Close cancels;
//   - a Consumer's fetches ahead (askAhead), at most Prefetch-1, each one
//     Fetch, cancelled by takeAhead, dropAhead and Close;
//   - confirmHeard, one per notice subscription made: a FlushTimeout of
//     at most heardConfirmWait;
//   - statusUnlessNoticed's watcher, one per retry's question to the
//     coordinators, which cancels the question at the stream's next owner
//     notice and ends with the question (at most a second);
//   - timers: a batcher's linger, the request timeout of each flight and
//     first attempt, and a notice subscription's idle drop noticeLinger
//     after its last user; a reconnect runs each flight's and first
//     attempt's context.AfterFunc, which fails it so that it is retried;
//   - with the client link, per stream with no way at most one learn (a
//     hello over the bus, then a dial unless its host's connection is
//     up; while another learn dials the same host it waits for that dial
//     and takes its connection, or gives up if it failed: one dial per
//     host at a time), maxLearns (16) at once in all, each bounded by
//     linkSetupTimeout for the hello and the wait and again for its own
//     dial, and per connection a reader,
//     which hands each reply to its batcher's onReply, and a writer;
//     clientLink.close (Client.Close, after the sendQueue is empty)
//     cancels the learns and closes the connections, and waits for all
//     of them;
//   - nats.go's delivery goroutine of each subscription: a batcher's
//     replies (until it is dropped as idle, or Client.Close and its last
//     flight), an AsyncPublisher's replies (until its Close) and owner
//     notices (until the idle drop). OnResult runs on these reply
//     goroutines and on the retries.
//
// Client.Close sends the open batches, waits until the sendQueue is empty
// and drains the connection if Connect made it; flights, owner watches
// and notice subscriptions end as above. AsyncPublishers and Consumers
// stop with their own Close. A batcher, with its reply subscription, is
// kept until Close or until it has been idle for batcherIdleTTL and a new
// batcher finds many held (dropIdleBatchers); a publish that batcherFor
// handed it to holds it until its add.
package client
