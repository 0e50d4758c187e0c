package compose

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// load is a steady publish load on one stream from a few publishers. Each
// publish attempt carries a payload of its own ("p<publisher>-<seq>-a<try>"),
// and the publishers retry a failed attempt themselves with a new payload
// instead of letting the client resend the same bytes: a payload can then
// legitimately appear in the stream at most once, so a record written twice
// (by replication or by two owners) shows up as a duplicate payload, and a
// confirmed record is identified by its payload alone.
type load struct {
	cl     *client.Client
	stream string
	minW   int // every confirm must report at least this many copies

	mu        sync.Mutex
	confirmed map[uint64]string // offset -> payload of every confirmed publish
	byEpoch   map[uint64]int    // confirms per epoch
	firstAt   map[uint64]time.Time
	failures  map[string]int // failed attempts by kind
	err       error          // the first thing no failover explains
	changed   chan struct{}  // closed and replaced on every confirm or error

	stop context.CancelFunc
	done sync.WaitGroup
}

// startLoad starts publishers goroutines publishing to stream through cl,
// which should make one attempt per publish (client.WithRetry(1, 0)).
func startLoad(ctx context.Context, cl *client.Client, stream string, publishers, minW int) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{
		cl: cl, stream: stream, minW: minW,
		confirmed: map[uint64]string{},
		byEpoch:   map[uint64]int{},
		firstAt:   map[uint64]time.Time{},
		failures:  map[string]int{},
		changed:   make(chan struct{}),
		stop:      cancel,
	}
	for p := range publishers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			l.publisher(ctx, p)
		}()
	}
	return l
}

// failoverKind names an error a failover explains, or returns "" for an
// error that is a bug (or a test problem) whenever it happens.
func failoverKind(err error) string {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, client.ErrTimeout), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, client.ErrOwnerLost):
		// The attempt went to an owner that died holding it; the client's
		// probe found the stream served by nobody, or by a newer owner.
		return "owner_lost"
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return "disconnected"
	}
	var werr *wire.Error
	if errors.As(err, &werr) {
		switch werr.Code {
		case wire.CodeNotOwner, wire.CodeSealed, wire.CodeRecovering, wire.CodeStaleEpoch,
			wire.CodeStreamUnknown, wire.CodeUnavailable, wire.CodeShuttingDown,
			// A confirm timeout is a publish the owner could not get to W
			// copies in time, which a lost follower or owner explains; the
			// record is simply not confirmed.
			wire.CodeConfirmTimeout:
			return werr.Code
		}
	}
	return ""
}

func (l *load) publisher(ctx context.Context, p int) {
	for seq := 0; ; seq++ {
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return
			}
			payload := fmt.Sprintf("p%d-%06d-a%d", p, seq, try)
			pc, err := l.cl.Publish(ctx, l.stream, []byte(payload))
			if err == nil {
				l.confirm(payload, pc)
				break
			}
			if ctx.Err() != nil {
				return
			}
			kind := failoverKind(err)
			if kind == "" {
				l.fail(fmt.Errorf("publisher %d: %s: unexpected error: %w", p, payload, err))
				return
			}
			l.mu.Lock()
			l.failures[kind]++
			l.mu.Unlock()
			// A short pause keeps a publisher from spinning while the
			// stream has no owner; the client already waited for the
			// attempt's reply or timeout.
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// signal wakes the waiters; l.mu must be held.
func (l *load) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *load) confirm(payload string, pc wire.PublishConfirm) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch prev, dup := l.confirmed[pc.Offset]; {
	case dup:
		l.setErr(fmt.Errorf("offset %d confirmed twice: for %q and for %q", pc.Offset, prev, payload))
	case pc.Duplicate:
		l.setErr(fmt.Errorf("%q confirmed as a duplicate at offset %d, but no producer id was sent", payload, pc.Offset))
	case pc.Copies < l.minW:
		l.setErr(fmt.Errorf("%q confirmed at offset %d with %d copies, below W=%d", payload, pc.Offset, pc.Copies, l.minW))
	}
	l.confirmed[pc.Offset] = payload
	l.byEpoch[pc.Epoch]++
	if _, ok := l.firstAt[pc.Epoch]; !ok {
		l.firstAt[pc.Epoch] = time.Now()
	}
	l.signal()
}

func (l *load) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setErr(err)
	l.signal()
}

// setErr keeps the first error; l.mu must be held.
func (l *load) setErr(err error) {
	if l.err == nil {
		l.err = err
	}
}

// Err returns the first error the load met that no failover explains.
func (l *load) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// WaitConfirms waits until n publishes have been confirmed at minEpoch or a
// later epoch, and returns when the first of those was confirmed.
func (l *load) WaitConfirms(ctx context.Context, n int, minEpoch uint64) (time.Time, error) {
	for {
		l.mu.Lock()
		got := 0
		var first time.Time
		for e, c := range l.byEpoch {
			if e >= minEpoch {
				got += c
				if at := l.firstAt[e]; first.IsZero() || at.Before(first) {
					first = at
				}
			}
		}
		err, changed := l.err, l.changed
		l.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
		if got >= n {
			return first, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %d confirms at epoch >= %d (have %d; %s): %w",
				n, minEpoch, got, l.Summary(), ctx.Err())
		}
	}
}

// CountSince returns how many publishes were confirmed at minEpoch or later.
func (l *load) CountSince(minEpoch uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for e, c := range l.byEpoch {
		if e >= minEpoch {
			n += c
		}
	}
	return n
}

// Stop stops the publishers and waits for them.
func (l *load) Stop() {
	l.stop()
	l.done.Wait()
}

// Confirmed returns a copy of the confirmed offsets and payloads.
func (l *load) Confirmed() map[uint64]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.confirmed)
}

// Summary describes the confirms per epoch and the failed attempts.
func (l *load) Summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d confirmed", len(l.confirmed))
	for _, e := range slices.Sorted(maps.Keys(l.byEpoch)) {
		fmt.Fprintf(&b, ", %d at epoch %d", l.byEpoch[e], e)
	}
	if len(l.failures) > 0 {
		b.WriteString("; failed attempts:")
		for _, k := range slices.Sorted(maps.Keys(l.failures)) {
			fmt.Fprintf(&b, " %s=%d", k, l.failures[k])
		}
	}
	return b.String()
}

// liveReader consumes the stream through a durable cursor for the whole
// test, across every failover, and remembers what it was handed at which
// offset.
type liveReader struct {
	cn   *client.Consumer
	stop context.CancelFunc
	done chan struct{}

	mu        sync.Mutex
	delivered map[uint64]string
	next      uint64 // the offset expected next
	err       error
	changed   chan struct{}
}

func startLiveReader(ctx context.Context, cl *client.Client, stream, cursor string) (*liveReader, error) {
	cn, err := cl.NewConsumer(stream, client.ConsumerConfig{
		Cursor: cursor, MaxRecords: 512, Wait: 200 * time.Millisecond, CommitInterval: 500 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &liveReader{cn: cn, stop: cancel, done: make(chan struct{}), delivered: map[uint64]string{}, changed: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

func (r *liveReader) run(ctx context.Context) {
	defer close(r.done)
	for {
		rec, err := r.cn.Next(ctx)
		r.mu.Lock()
		switch {
		case err != nil && ctx.Err() != nil:
			r.mu.Unlock()
			return
		case err != nil:
			r.err = fmt.Errorf("live reader: %w", err)
		case rec.Offset != r.next:
			// A new cursor starts at the retained head (0), and a
			// consumer goes on from its own position: every offset is
			// handed out once, in order, with no gap.
			r.err = fmt.Errorf("live reader: got offset %d, want %d", rec.Offset, r.next)
		default:
			r.delivered[rec.Offset] = string(rec.Data)
			r.next++
		}
		close(r.changed)
		r.changed = make(chan struct{})
		failed := r.err != nil
		r.mu.Unlock()
		if failed {
			return
		}
	}
}

// WaitThrough waits until the reader has been handed every offset up to and
// including last.
func (r *liveReader) WaitThrough(ctx context.Context, last uint64) error {
	for {
		r.mu.Lock()
		next, err, changed := r.next, r.err, r.changed
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if next > last {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("live reader at offset %d, waiting for %d: %w", next, last, ctx.Err())
		}
	}
}

// Close stops the reader and closes its consumer, which commits the cursor
// at everything handed out; it returns that position.
func (r *liveReader) Close(ctx context.Context) (uint64, error) {
	r.stop()
	<-r.done
	if err := r.cn.Close(ctx); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next, r.err
}

// Delivered returns a copy of what the reader was handed, by offset.
func (r *liveReader) Delivered() map[uint64]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.delivered)
}

// readLog reads the stream from its retained head (a new durable cursor)
// through offset last. Halfway it closes its consumer and opens a new one on
// the same cursor, which must resume exactly where the first stopped.
func readLog(ctx context.Context, cl *client.Client, stream, cursor string, last uint64) ([]string, error) {
	cfg := client.ConsumerConfig{Cursor: cursor, MaxRecords: 1024, Wait: 200 * time.Millisecond, CommitInterval: -1}
	cn, err := cl.NewConsumer(stream, cfg)
	if err != nil {
		return nil, err
	}
	var log []string
	half := last / 2
	reopened := false
	for uint64(len(log)) <= last {
		rec, err := cn.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s at offset %d: %w", stream, len(log), err)
		}
		if rec.Offset != uint64(len(log)) {
			return nil, fmt.Errorf("read %s: got offset %d, want %d (reopened: %v)", stream, rec.Offset, len(log), reopened)
		}
		log = append(log, string(rec.Data))
		if !reopened && rec.Offset == half {
			// Close counts this record consumed and commits the cursor
			// at half+1; the next consumer must start there.
			if err := cn.Close(ctx); err != nil {
				return nil, fmt.Errorf("close cursor %s at %d: %w", cursor, half+1, err)
			}
			if cn, err = cl.NewConsumer(stream, cfg); err != nil {
				return nil, err
			}
			reopened = true
		}
	}
	return log, cn.Close(ctx)
}

// checkLog checks the stream's records against what was confirmed and what
// the live reader was handed: every payload at most once, every confirmed
// payload at its confirmed offset, and nothing handed out earlier changed.
func checkLog(log []string, confirmed, delivered map[uint64]string) []error {
	var errs []error
	where := map[string]uint64{}
	for off, p := range log {
		if prev, dup := where[p]; dup {
			errs = append(errs, fmt.Errorf("payload %q at offsets %d and %d", p, prev, off))
		}
		where[p] = uint64(off)
	}
	for _, off := range slices.Sorted(maps.Keys(confirmed)) {
		want := confirmed[off]
		switch {
		case off >= uint64(len(log)):
			errs = append(errs, fmt.Errorf("confirmed %q at offset %d, beyond the %d records read", want, off, len(log)))
		case log[off] != want:
			errs = append(errs, fmt.Errorf("offset %d holds %q, but %q was confirmed there", off, log[off], want))
		}
	}
	for _, off := range slices.Sorted(maps.Keys(delivered)) {
		if off < uint64(len(log)) && log[off] != delivered[off] {
			errs = append(errs, fmt.Errorf("offset %d holds %q, but the live reader was handed %q there", off, log[off], delivered[off]))
		}
	}
	if len(errs) > 20 {
		errs = append(errs[:20], fmt.Errorf("... and %d more", len(errs)-20))
	}
	return errs
}
