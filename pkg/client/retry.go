package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// retryable reports whether err is one a failover explains: nobody owns the
// stream right now, the host answering is no longer (or not yet) its owner,
// or the owner went silent; or the owner is at its cap of requests in flight
// (overloaded), which a backoff lets drain; or the stream's assignment holds
// fewer copies than its min_copies (not_enough_copies: met again once
// placement adds a copy; a publish refused on arrival was not written, but
// one already waiting when the floor rose was, and may still be delivered,
// as with sealed, so only a producer id keeps its retry from writing it
// twice). A request the connection refused to buffer while it reconnects
// (its reconnect buffer full) was not sent, and is retried too.
// Everything else, confirm_timeout included, goes back to the caller.
func retryable(err error) bool {
	switch {
	case errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, ErrTimeout),
		errors.Is(err, ErrOwnerLost),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrReconnectBufExceeded):
		return true
	}
	var werr *wire.Error
	if !errors.As(err, &werr) {
		return false
	}
	switch werr.Code {
	case wire.CodeNotOwner, wire.CodeSealed, wire.CodeShuttingDown,
		wire.CodeRecovering, wire.CodeStaleEpoch, wire.CodeStreamUnknown,
		wire.CodeUnavailable, wire.CodeOverloaded, wire.CodeNotEnoughCopies:
		return true
	}
	return false
}

// backoff returns the delay before attempt n+1 after n failed attempts:
// exponential from min to max, with "equal jitter" (half fixed, half random)
// so that many clients failing together do not retry in lockstep.
func backoff(n int, minDelay, maxDelay time.Duration) time.Duration {
	if minDelay <= 0 {
		minDelay = time.Millisecond
	}
	if maxDelay < minDelay {
		maxDelay = minDelay
	}
	d := minDelay
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	half := d / 2
	return half + rand.N(half+1)
}

// retrier drives the attempts of one request across a failover.
type retrier struct {
	c      *Client
	stream string // "" for requests about no stream (admin)
	op     string

	start    time.Time
	attempts int
	lastErr  error
	// status is the stream's status as a coordinator last reported it,
	// "" while unknown.
	status    string
	checkedAt time.Time
	// checks is how many times the coordinators were asked (infoWait).
	checks int
	// explicit is the stream id the request names of its own
	// (WithStreamID, FromStreamID); the client's pin counts otherwise.
	explicit uint64
	// attemptMark is where the stream's owner notices stood when the
	// current attempt began (noticeMark).
	attemptMark noticeMark
}

// newRetrier drives a request about stream ("" for none) that names the
// stream id explicit of its own (0: the client's pin counts).
func (c *Client) newRetrier(op, stream string, explicit uint64) *retrier {
	r := &retrier{c: c, stream: stream, op: op, start: time.Now(), explicit: explicit}
	r.markAttempt()
	return r
}

// markAttempt records where the stream's owner notices stand as an
// attempt begins.
func (r *retrier) markAttempt() {
	if r.stream != "" {
		r.attemptMark = r.c.noticeMark(r.stream)
	}
}

// next is called after a failed attempt. It returns nil when another
// attempt should be made (after the backoff, or at once after an abandoned
// attempt or a new owner's notice), or the error to return to the caller.
// Once Client.Close began it returns ErrClosed instead of another attempt,
// also when Close began while it waited.
func (r *retrier) next(ctx context.Context, err error) error {
	if ferr := r.wait(ctx, err); ferr != nil {
		return ferr
	}
	if r.c.closing.Load() {
		return r.closedWhileRetrying(err)
	}
	return nil
}

// closedWhileRetrying is the error of a request whose retry found Close
// begun: ErrClosed wrapping the last attempt's error, which says whether
// the request may have taken effect (a timeout's record may have been
// written).
func (r *retrier) closedWhileRetrying(err error) error {
	return r.wrap(fmt.Errorf("%w while retrying after: %w", ErrClosed, err))
}

// wait is next's work before the closing check: the limits, the
// coordinators' status and the wait before the next attempt.
func (r *retrier) wait(ctx context.Context, err error) error {
	r.attempts++
	if ctx.Err() != nil && r.lastErr != nil {
		// The caller's context ended during a retry: report why the
		// earlier attempts failed, not just the context.
		return r.giveUp(ctx.Err())
	}
	if !retryable(err) {
		return r.wrap(err)
	}
	if r.c.closing.Load() {
		// Nothing retries after Client.Close: on a connection the
		// caller owns (New), which Close leaves open, a retry would go
		// on until the limits ran out. Checked before the wait too, so
		// as not to wait for nothing.
		return r.closedWhileRetrying(err)
	}
	r.lastErr = err
	if wire.CodeOf(err) == wire.CodeRecovering {
		r.status = wire.StatusRecovering
	}
	// The limits come before the status check: a request that will not be
	// retried has no use for the answer, and asking would send one more
	// request (and spend up to a second) after the caller's limit ran out.
	o := r.c.opts
	delay := backoff(r.attempts, o.backoffMin, o.backoffMax)
	if o.maxAttempts > 0 && r.attempts >= o.maxAttempts {
		return r.giveUp(nil)
	}
	if o.maxRetryTime > 0 && time.Since(r.start)+delay > o.maxRetryTime {
		return r.giveUp(nil)
	}
	// Two failures are retried at once, without a backoff or the status
	// check, since a serving owner is known:
	//   - an attempt abandoned because an owner at a newer epoch, or one
	//     that began serving after the attempt went out, answered the
	//     owner watch's probe (ErrOwnerLost). In a mass failover most
	//     retries a new owner's notice woke were abandoned so (the notice
	//     also kicks a probe, which the new owner answers above the epoch
	//     the client knew when the retry went out). It does not spin: the
	//     probe taught the watch the newer epoch, so the next attempt is
	//     abandoned only for a newer epoch still or an owner that
	//     (re)began serving after it went out, each found by a paced probe;
	//   - an attempt during which a new owner's notice was heard (its probe
	//     may be what abandoned the attempt): the wait below would miss it.
	//     This one is found below, with the wait's channel.
	// A caller whose context ended gets its error instead: a batched
	// publish sends before it looks at the context, so a retry now would
	// send the record after the caller gave up.
	retryNow := func() error {
		if ctx.Err() != nil {
			return r.giveUp(ctx.Err())
		}
		r.markAttempt()
		r.countRetry(err)
		return nil
	}
	if errors.Is(err, ErrOwnerLost) {
		return retryNow()
	}
	// A new owner's notice ends the wait early (notices.go). The wait
	// starts before the status check: a notice that arrives while the
	// coordinators are asked (a round trip, longer on a busy cluster, and
	// the first retry after an attempt that did not merely time out asks)
	// must wake the retry too, not leave it its whole backoff. A notice
	// heard since the attempt began, before the wait's channel was handed
	// out, closed a channel this retry never held: awaitOwnerSince, which
	// hands out the channel, finds it in the stream's count under the same
	// lock, and the retry goes at once (the second case above).
	var notice <-chan struct{}
	if r.stream != "" {
		if h := r.c.testHooks.beforeAwait; h != nil {
			h()
		}
		var noticed bool
		var release func()
		notice, noticed, release = r.c.awaitOwnerSince(r.stream, r.attemptMark)
		defer release()
		if noticed {
			return retryNow()
		}
	}
	if r.stream != "" && !timedOut(err) && r.infoDue() {
		// The coordinators know whether this is a failover or a stream
		// that does not exist; ask them now and then while retrying.
		r.checkedAt = time.Now()
		r.checks++
		info, ierr := r.statusUnlessNoticed(ctx, notice)
		switch {
		case errors.Is(ierr, ErrNoSuchStream):
			return fmt.Errorf("%s %s: %w (last attempt: %w)", r.op, r.stream, ierr, err)
		case ierr == nil:
			if meant := r.c.idFor(r.stream, r.explicit); meant != 0 && info.StreamID != meant {
				return fmt.Errorf("%s: %w (last attempt: %w)", r.op, replacedError(r.stream, meant, info.StreamID), err)
			}
			r.status = info.Status
		}
	}
	t := time.NewTimer(r.quietDelay(err, delay))
	defer t.Stop()
	if h := r.c.testHooks.beforeWait; h != nil {
		h()
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-notice:
	}
	// retryNow gives up if the caller's context ended, also when a
	// notice or the timer was ready with it and won the select.
	return retryNow()
}

// testHooks holds functions a test runs inside its client's
// retrier.next (nil otherwise; set before the client is used):
// beforeAwait after an attempt failed and before next hands out the
// wait's channel, beforeWait just before its wait.
type testHooks struct{ beforeAwait, beforeWait func() }

// statusUnlessNoticed asks the coordinators about the stream
// (streamStatus), and gives up on the answer if a new owner's notice
// arrives first: the retry then goes to that owner at once, and the
// coordinators are asked again at the next check that falls due
// (infoDue). In 10,000-stream failovers the coordinators, busy
// recovering the streams, took up to the question's 1 s limit to answer:
// the retries caught in a question when their new owner announced itself
// (62 to 298 of about 2,500 owned streams in three runs) sent their next
// attempt 0.33 to 1.59 s after the notice at the median, against 0.00 to
// 0.32 s for the retries that were merely waiting (docs/benchmarks.md,
// session 50).
// The caller ignores an error, whether the question was cancelled or
// failed.
func (r *retrier) statusUnlessNoticed(ctx context.Context, notice <-chan struct{}) (wire.StreamInfo, error) {
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case <-notice:
		return wire.StreamInfo{}, context.Canceled // heard already: not asked
	default:
	}
	go func() {
		select {
		case <-notice:
			cancel()
		case <-qctx.Done():
		}
	}()
	return r.c.streamStatus(qctx, r.stream)
}

// timedOut reports whether err says the attempt went unanswered within
// the request timeout. A host took it: with nobody subscribed NATS answers
// no responders at once. So the stream has a server, a slow one, and the
// coordinators can say nothing that changes the retry, which goes to the
// same subject; a later attempt that fails otherwise asks them. Asking
// after every timeout is what flooded them in a mass failover: each
// publish that outlived the request timeout while the hosts were busy
// sent a stream.info (11,180 in one 10,000-stream failover, 3,471 of them
// answered no quorum by coordinators busy recovering).
func timedOut(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, nats.ErrTimeout)
}

// quietDelay returns the wait before the retry of an attempt that failed
// with err, delay by the backoff: longer, up to quietRetryMax, once the
// request has been retried for quietAfter, nobody serves the stream (no
// responders, or a host that no longer owns it answered) and the stream's
// notices are heard (noticesHeard). A new owner announces itself once it
// takes publishes and its notice ends the wait at once, so retrying every
// few milliseconds until then only loads the cluster that is failing the
// stream over (thousands of streams at once in a mass failover). An owner
// that comes back without a notice (one that only reconnected) is met up to
// quietRetryMax later. The wait stays within the retry time limit.
func (r *retrier) quietDelay(err error, delay time.Duration) time.Duration {
	o := r.c.opts
	waited := time.Since(r.start)
	if r.stream == "" || !nobodyServes(err) || waited < quietAfter || !r.c.noticesHeard(r.stream) {
		return delay
	}
	d := backoff(r.attempts, o.backoffMin, max(o.backoffMax, quietRetryMax))
	if o.maxRetryTime > 0 {
		d = min(d, o.maxRetryTime-waited)
	}
	return max(d, delay)
}

// nobodyServes reports whether err says that nobody, or a host that is not
// (or no longer) the stream's owner, got the request: a new owner will
// announce itself.
func nobodyServes(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	switch wire.CodeOf(err) {
	case wire.CodeNotOwner, wire.CodeSealed, wire.CodeShuttingDown:
		return true
	}
	return false
}

// Pace of a request waiting for a new owner while notices are heard
// (quietDelay; the owner watch's probes too, probeEveryQuiet).
const (
	// quietAfter is how long a request waits at its usual pace first: a
	// failover of one stream ends well within it.
	quietAfter = time.Second
	// quietRetryMax bounds the retry backoff after quietAfter.
	quietRetryMax = time.Second
)

// infoDue reports whether the retry asks the coordinators about the stream
// now (next skips it after an attempt that timed out, timedOut): at the
// first retry, then after infoWait, and, once they said the
// stream is recovering or waiting, only every infoSettled. The next change
// of a failing-over stream is its new owner, which announces itself and
// confirms the retry; asking on meanwhile sent the coordinators that
// recover the streams a stream.info per stream every 2 s. A stream deleted
// while it failed over is reported up to infoSettled late.
func (r *retrier) infoDue() bool {
	if r.checkedAt.IsZero() {
		return true
	}
	wait := infoWait(r.c.opts.infoInterval, r.checks)
	if r.status == wire.StatusRecovering || r.status == wire.StatusWaiting {
		wait = max(wait, r.c.opts.infoInterval*infoSettled)
	}
	return time.Since(r.checkedAt) >= wait
}

// infoSettled is how many info intervals apart (8 s with
// DefaultInfoInterval) a retry asks again once the coordinators said the
// stream is recovering or waiting.
const infoSettled = 32

// countRetry counts the retry about to go after an attempt that failed
// with err: for a request about a stream, once, in the count of its
// reason (Stats.RetriesNoResponders...RetriesOther; Stats adds them up
// into Retries); in Stats.AdminRetries for one about none.
func (r *retrier) countRetry(err error) {
	s := &r.c.stats
	switch {
	case r.stream == "":
		s.adminRetries.Add(1)
	case errors.Is(err, nats.ErrNoResponders):
		s.retriesNoResponders.Add(1)
	case timedOut(err):
		s.retriesTimedOut.Add(1)
	case errors.Is(err, ErrOwnerLost):
		s.retriesOwnerLost.Add(1)
	default:
		s.retriesOther.Add(1)
	}
}

// infoWait is how long a retrying request waits after its checks-th
// question to the coordinators before the next: interval after the first,
// then twice as long each time, up to 8 times interval. A
// failover of thousands of streams has as many publishers retrying at
// once; asking every interval, they sent the coordinators that were
// recovering those streams thousands of stream.info requests a second.
// The first question still goes at the first retry that follows an
// attempt answered or refused (a stream that does not exist is reported
// at once), and an owner's notice ends a retry's
// wait whatever the interval.
func infoWait(interval time.Duration, checks int) time.Duration {
	return interval << min(max(checks-1, 0), maxInfoDoublings)
}

// maxInfoDoublings bounds infoWait: at most 8 times the interval (2 s
// with DefaultInfoInterval).
const maxInfoDoublings = 3

func (r *retrier) wrap(err error) error {
	if r.stream == "" {
		return fmt.Errorf("%s: %w", r.op, err)
	}
	return fmt.Errorf("%s %s: %w", r.op, r.stream, err)
}

// giveUp builds the final error after the limits ran out: ErrRecovering
// when the stream is failing over, otherwise the last attempt's error.
func (r *retrier) giveUp(ctxErr error) error {
	what := r.op
	if r.stream != "" {
		what += " " + r.stream
	}
	cause := r.lastErr
	if ctxErr != nil {
		cause = fmt.Errorf("%w (last attempt: %w)", ctxErr, r.lastErr)
	}
	if r.status == wire.StatusRecovering || r.status == wire.StatusWaiting {
		return fmt.Errorf("%s: %w: gave up after %d attempts in %v: %w",
			what, ErrRecovering, r.attempts, time.Since(r.start).Round(time.Millisecond), cause)
	}
	return fmt.Errorf("%s: gave up after %d attempts in %v: %w",
		what, r.attempts, time.Since(r.start).Round(time.Millisecond), cause)
}

// streamStatus asks a coordinator about the stream (its status and id),
// within a short time so that a missing coordinator does not hold up the
// retries.
func (c *Client) streamStatus(ctx context.Context, stream string) (wire.StreamInfo, error) {
	if err := ctx.Err(); err != nil {
		// Cut before it was asked (a notice came first): nats sends no
		// request on an ended context, and StatusChecks counts those sent.
		return wire.StreamInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.adminTimeout, time.Second))
	defer cancel()
	c.stats.statusChecks.Add(1)
	var info wire.StreamInfo
	err := c.adminOnce(ctx, wire.VerbStreamInfo, wire.StreamRef{Stream: stream}, &info)
	if err != nil {
		if wire.CodeOf(err) == wire.CodeNotFound {
			return info, fmt.Errorf("%w: %w", ErrNoSuchStream, err)
		}
		return info, err
	}
	return info, nil
}
