// Package client is the Go client of brook: publish records to a stream
// (synchronously or through a bounded window of outstanding confirms), fetch
// them, consume them with a durable cursor, and run the admin verbs of the
// coordinators.
//
// # Routing and failover
//
// Only a stream's current owner subscribes to its subjects, so NATS routes
// every request to the owner and the client needs no topology. While a
// stream fails over there is briefly no owner (nats.ErrNoResponders), or a
// host answers not_owner, sealed, shutting_down or recovering, or a request
// gets no reply because the owner died holding it. A publish that waits
// longer than WithOwnerProbe (250ms by default) makes the client ask who
// serves the stream, with a fetch that reads nothing; once an owner at a
// newer epoch than the one the attempt reached answers, the attempt is
// abandoned (ErrOwnerLost) instead of waiting out the request timeout (see
// ownerwatch.go for how the owner an attempt reached is bounded). The
// client retries such a request with a bounded exponential backoff with
// jitter, bounded by the caller's context and by the retry limits of the
// Client (see WithRetry).
// While it retries it asks a coordinator (admin stream.info) about the
// stream, so a caller that runs out of patience gets ErrRecovering ("the
// stream is failing over; retry later") when the stream is recovering or
// waiting, and ErrNoSuchStream at once when the stream does not exist. It
// asks only before a retry: once the limits have run out it gives up
// without another request, so with WithRetry(1, 0) a failed attempt is the
// only request made (and ErrRecovering then needs the host's recovering
// answer).
//
// # Delivery guarantees
//
// Publishing is at-least-once. A publish is reported confirmed only when the
// owner replied with a wire.PublishConfirm, which it sends once W copies
// hold the record durably. A publish that the owner could not confirm in
// time is returned as a *wire.Error with code wire.CodeConfirmTimeout and is
// not retried: the record may or may not survive, and the caller decides.
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
// # Errors
//
// Error replies of the services are decoded into *wire.Error, so
// errors.As(err, &werr) and wire.CodeOf(err) work on every error this
// package returns.
package client
