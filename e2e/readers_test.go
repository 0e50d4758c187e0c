package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// TestLatestReaderAcrossFailover: a reader that starts at "latest" while
// the owner's durable tail runs ahead of its confirmed watermark, and then
// reads on by offset across a failover, is handed every record confirmed
// at or above the watermark it started at.
//
// Both followers of a 3-copy majority_durable stream are paused (SIGSTOP)
// for a few hundred milliseconds under load, and a burst of publishes is
// sent meanwhile: the owner writes them to its own log, but nothing new can
// be confirmed, so its tail runs ahead of its watermark. A reader then asks
// for "latest", the owner is SIGKILLed and the followers resume; one of
// them is promoted and confirms the retried and the new publishes.
//
// Rule (issue 12): no fetch reply, cursor or client position points past
// the confirmed watermark of the copy that answered. A "latest" start at
// the owner's tail would put the reader past records that the new owner
// confirms after the failover (at offsets between the old watermark and the
// old tail), and the reader would never see them.
//
// It catches: a "latest" start (or an empty reply's Next) past the
// confirmed watermark, and a reader that silently skips confirmed records
// across a failover.
func TestLatestReaderAcrossFailover(t *testing.T) {
	e := newEnv(t, opts{timeout: 2 * time.Minute})
	const stream = "latest-reader"
	before := e.createStream(stream, 3)
	epoch, oldOwner := before.Assignment.Epoch, before.Assignment.Owner
	followers := before.Assignment.Followers
	if len(followers) != 2 {
		t.Fatalf("3 copies, yet followers %v", followers)
	}

	led := workload.NewLedger()
	ld := e.load(stream, "lr", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, epoch)

	// Hold both followers back: the owner can write but confirm nothing.
	paused := true
	for _, f := range followers {
		e.signal(e.host(f), syscall.SIGSTOP)
	}
	pausedAt := time.Now()
	resume := func() {
		if !paused {
			return
		}
		paused = false
		for _, f := range followers {
			e.signal(e.host(f), syscall.SIGCONT)
		}
	}
	defer resume()

	// A burst of publishes widens the gap beyond the four publishers'
	// in-flight records. They are retried across the failover like the
	// load's and recorded in the same ledger.
	burst := publishBurst(e.ctx, e.cl, stream, "lr-burst", 24, led)
	defer burst.Wait()
	var gap frame.Batch
	e.poll("the owner's tail to run ahead of its confirmed watermark", 5*time.Second, func(ctx context.Context) (bool, string, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		b, err := e.cl.Fetch(ctx, stream, wire.FetchRequest{Start: "earliest", MaxRecords: 1})
		if err != nil {
			return false, err.Error(), nil
		}
		gap = *b
		return b.Tail >= b.Confirmed+16, fmt.Sprintf("tail %d confirmed %d", b.Tail, b.Confirmed), nil
	})
	e.logf("owner %s: tail %d, confirmed watermark %d (followers paused %v ago)", oldOwner, gap.Tail, gap.Confirmed,
		time.Since(pausedAt).Round(time.Millisecond))

	// The reader starts at "latest" while the followers are still paused,
	// about 300ms after they were (the interleaving).
	sleepCtx(e.ctx, time.Until(pausedAt.Add(300*time.Millisecond)))
	rd, err := startOffsetReader(e.ctx, e.cl, stream, readerConfig{name: "latest", start: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.stop()
	first := rd.firstReply()
	e.logf("latest reader's first reply: next %d, owner's tail %d, confirmed watermark %d, epoch %d, %d records",
		first.Next, first.Tail, first.Confirmed, first.Epoch, len(first.Records))

	e.signal(e.host(oldOwner), syscall.SIGKILL)
	resume()
	e.logf("followers held back for %v", time.Since(pausedAt).Round(time.Millisecond))
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	e.logf("failover: %s -> %s at epoch %d, starts %v", oldOwner, after.Assignment.Owner, after.Assignment.Epoch, after.Starts)
	e.waitConfirms(led, 150, epoch+1)
	burst.Wait()
	e.stopLoad(ld, led)

	end := uint64(0)
	for _, o := range led.Outcomes() {
		if o.Confirmed {
			end = max(end, o.Confirm.Offset+1)
		}
	}
	if err := rd.waitPosition(end, 20*time.Second); err != nil {
		t.Errorf("the latest reader did not reach the last confirmed offset %d: %v", end-1, err)
	}
	rd.stop()
	got := rd.result()
	e.logf("latest reader: %d replies, %d offsets, position %d, %d errors", got.replies, len(got.data), got.next, got.errors)

	// The rule, on the reply itself.
	start := first.Next
	if len(first.Records) > 0 {
		start = first.Records[0].Offset
	}
	if start > first.Confirmed {
		t.Errorf("the reply to a \"latest\" fetch starts the reader at %d, past the confirmed watermark %d of the owner that answered (its tail was %d)",
			start, first.Confirmed, first.Tail)
	}

	// End to end: every record confirmed at or above the watermark the
	// reader started under was handed to it, at its offset.
	wm := first.Confirmed
	var missing, wrong []string
	confirmedAbove, sentAfter := 0, 0
	for _, o := range sortedConfirms(led.Outcomes()) {
		if o.Confirm.Offset < wm {
			continue
		}
		confirmedAbove++
		when := "sent before the reader started"
		if o.Sent.After(rd.startedAt) {
			when = "sent after the reader started"
			sentAfter++
		}
		desc := fmt.Sprintf("%s at offset %d (epoch %d, duplicate=%v, %s)", o.ID, o.Confirm.Offset, o.Confirm.Epoch, o.Confirm.Duplicate, when)
		d, ok := got.data[o.Confirm.Offset]
		switch {
		case !ok:
			missing = append(missing, desc)
		case string(d) != string(o.Data):
			wrong = append(wrong, fmt.Sprintf("%s, delivered holding %.40q", desc, d))
		}
	}
	e.logf("%d records confirmed at offsets >= %d (%d of them sent after the reader started); ledger %v",
		confirmedAbove, wm, sentAfter, led.Stats())
	if confirmedAbove == 0 || sentAfter == 0 {
		t.Fatalf("nothing was confirmed at or above the reader's watermark %d after it started: the test checked nothing", wm)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d records confirmed at or above the watermark %d the latest reader started under were never handed to it (it started at %d); first ones:\n  %s",
			len(missing), confirmedAbove, wm, start, strings.Join(missing[:min(len(missing), 12)], "\n  "))
	}
	if len(wrong) > 0 {
		t.Errorf("%d confirmed records were handed to the reader with other bytes; first ones:\n  %s",
			len(wrong), strings.Join(wrong[:min(len(wrong), 12)], "\n  "))
	}
	if len(got.problems) > 0 {
		t.Errorf("latest reader: %s", strings.Join(got.problems, "\n  "))
	}
	if final := e.info(stream); final.Assignment.Epoch != epoch+1 {
		t.Fatalf("another ownership change after the failover: %s", describe(final))
	}
}

// sortedConfirms returns the confirmed outcomes by offset.
func sortedConfirms(outs []workload.Outcome) []workload.Outcome {
	var out []workload.Outcome
	for _, o := range outs {
		if o.Confirmed {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b workload.Outcome) int {
		switch {
		case a.Confirm.Offset < b.Confirm.Offset:
			return -1
		case a.Confirm.Offset > b.Confirm.Offset:
			return 1
		}
		return 0
	})
	return out
}

// publishBurst sends n one-record publishes at once (producer <name>-<i>,
// sequence 0), each retried across failovers by the client, and records
// their outcomes in led.
func publishBurst(ctx context.Context, cl *client.Client, stream, name string, n int, led *workload.Ledger, opts ...client.PublishOption) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := workload.ID{Producer: fmt.Sprintf("%s-%d", name, i), Seq: 0}
			data := workload.Payload(id, 64)
			o := workload.Outcome{ID: id, Data: data, Sent: time.Now()}
			pc, err := cl.Publish(ctx, stream, data, append([]client.PublishOption{client.WithProducer(id.Producer, 0)}, opts...)...)
			o.Done = time.Now()
			if err == nil {
				o.Confirmed, o.Confirm = true, pc
			} else {
				o.Err, o.Stopped = err, ctx.Err() != nil
			}
			_ = led.Record(o)
		}()
	}
	return &wg
}

// readerConfig configures an offsetReader.
type readerConfig struct {
	name string
	// start is the first fetch's start ("latest", "earliest") or, if
	// empty, the offset from.
	start string
	from  uint64
	// opts go with every fetch (client.FromStreamID).
	opts []client.ReadOption
	// terminal, if set, says which fetch errors end the reader; after
	// any other error it fetches again from the same offset, as a
	// stubborn consumer would.
	terminal func(error) bool
}

// offsetReader reads a stream as a client that tracks its own position
// does: a first fetch at a start, then by offset from each reply's Next,
// long-polling. It remembers what each offset held and what went wrong.
type offsetReader struct {
	cl     *client.Client
	stream string
	cfg    readerConfig
	cancel context.CancelFunc
	done   chan struct{}

	startedAt time.Time // when the first reply came back
	first     frame.Batch

	mu  sync.Mutex
	res readerResult
}

// readerResult is what an offsetReader saw.
type readerResult struct {
	next     uint64
	data     map[uint64][]byte
	epochs   map[uint64]uint64 // the epoch of the reply that handed each offset out
	replies  int
	errors   int
	problems []string
	// err is the error that ended the reader (terminal).
	err error
	// lastErr is the last fetch error of any reader.
	lastErr error
}

// startOffsetReader makes the first fetch (synchronously, so that the
// caller knows when the reader started) and goes on in the background.
func startOffsetReader(ctx context.Context, cl *client.Client, stream string, cfg readerConfig) (*offsetReader, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &offsetReader{cl: cl, stream: stream, cfg: cfg, cancel: cancel, done: make(chan struct{}),
		res: readerResult{data: map[uint64][]byte{}, epochs: map[uint64]uint64{}}}
	req := wire.FetchRequest{Start: cfg.start, MaxRecords: 512}
	if cfg.start == "" {
		req.Start, req.Offset = "offset", cfg.from
	}
	b, err := cl.Fetch(ctx, stream, req, cfg.opts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("reader %s: first fetch: %w", cfg.name, err)
	}
	r.startedAt = time.Now()
	r.first = *b
	r.res.next = b.Next
	if len(b.Records) > 0 {
		r.res.next = b.Records[0].Offset
	}
	r.take(b)
	go r.run(ctx)
	return r, nil
}

// take records one reply.
func (r *offsetReader) take(b *frame.Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.replies++
	for _, rec := range b.Records {
		if prev, ok := r.res.data[rec.Offset]; ok {
			if string(prev) != string(rec.Data) {
				r.problemLocked("offset %d was handed out as %.40q and later as %.40q", rec.Offset, prev, rec.Data)
			}
			continue
		}
		if rec.Offset > r.res.next {
			r.problemLocked("offsets %d to %d were skipped: a reply at epoch %d handed out %d", r.res.next, rec.Offset-1, b.Epoch, rec.Offset)
		}
		r.res.data[rec.Offset] = append([]byte(nil), rec.Data...)
		r.res.epochs[rec.Offset] = b.Epoch
		r.res.next = max(r.res.next, rec.Offset+1)
	}
	r.res.next = max(r.res.next, b.Next)
}

func (r *offsetReader) problemLocked(format string, args ...any) {
	if len(r.res.problems) < 20 {
		r.res.problems = append(r.res.problems, fmt.Sprintf(format, args...))
	}
}

func (r *offsetReader) run(ctx context.Context) {
	defer close(r.done)
	for ctx.Err() == nil {
		r.mu.Lock()
		next := r.res.next
		r.mu.Unlock()
		b, err := r.cl.Fetch(ctx, r.stream, wire.FetchRequest{Start: "offset", Offset: next, MaxRecords: 512, WaitMS: 200}, r.cfg.opts...)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			r.res.errors++
			r.res.lastErr = err
			if r.cfg.terminal != nil && r.cfg.terminal(err) {
				r.res.err = err
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		r.take(b)
	}
}

// firstReply is the reply to the first fetch.
func (r *offsetReader) firstReply() frame.Batch { return r.first }

// stop stops the reader and waits for it.
func (r *offsetReader) stop() {
	r.cancel()
	<-r.done
}

// ended reports whether the reader stopped by itself (terminal).
func (r *offsetReader) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// result returns a copy of what the reader saw so far.
func (r *offsetReader) result() readerResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.res
	res.data = make(map[uint64][]byte, len(r.res.data))
	for k, v := range r.res.data {
		res.data[k] = v
	}
	res.epochs = make(map[uint64]uint64, len(r.res.epochs))
	for k, v := range r.res.epochs {
		res.epochs[k] = v
	}
	res.problems = slices.Clone(r.res.problems)
	return res
}

// waitPosition waits until the reader's position reaches end.
func (r *offsetReader) waitPosition(end uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		next, last := r.res.next, r.res.lastErr
		r.mu.Unlock()
		if next >= end {
			return nil
		}
		if r.ended() {
			return fmt.Errorf("the reader stopped at %d: %w", next, r.result().err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still at %d after %v (last fetch error: %v)", next, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
