package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// TestDeleteRecreateUnderLoad: a stream is deleted and created again under
// the same name while producers and readers keep going, and while the
// deleted incarnation's owner is paused (SIGSTOP) across the delete and
// the create; it wakes up afterwards still believing it owns the deleted
// stream. Its followers dropped their copies when they applied the delete.
//
// Clients, each its own connection:
//
//   - a producer on a default client (pinned to the id of its first
//     confirm), one naming the first stream's id explicitly
//     (client.WithStreamID), one with pinning turned off, and a default
//     client that starts after the create;
//   - readers that go on by offset from each reply's Next: on the first
//     incarnation a default client and one naming its id
//     (client.FromStreamID), plus one with pinning off (which, as
//     documented, may read both: it shows the hazard was there); on the
//     second incarnation a default client and one naming its id, both
//     started while the old owner is still paused.
//
// It checks (issue 12):
//
//   - every confirm names the stream id of one of the two incarnations, and
//     no confirm of the deleted one is received after its owner woke (the
//     woken owner must not confirm; one received between the delete's
//     reply and the wake was sent before the owner was paused);
//   - a default (pinned) client never gets confirms of both incarnations; a
//     pinned producer that meets the new one gets client.ErrStreamReplaced;
//   - no pinned or explicit-id reader is handed records of both
//     incarnations: the first incarnation's readers end with
//     ErrStreamReplaced or not_found and read nothing of the second; the
//     second's readers read only its records, each at its offset;
//   - every confirm of the second incarnation is in it at its offset.
func TestDeleteRecreateUnderLoad(t *testing.T) {
	e := newEnv(t, opts{timeout: 2 * time.Minute})
	const stream = "incarnations"
	first := e.createStream(stream, 3)
	id1, oldOwner := first.StreamID, first.Assignment.Owner

	newClient := func(name string, o ...client.Option) *client.Client {
		t.Helper()
		cl, err := client.Connect(e.ctx, e.c.NATSURL(), append(append(e.c.ClientOptions(auth.Client), client.WithName(name),
			client.WithRequestTimeout(requestTimeout), client.WithRetry(0, 10*time.Second),
			client.WithLogger(slog.New(slog.DiscardHandler))), o...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	unpinned := client.WithStreamPinning(false)

	// Producers on the first incarnation.
	ledDefault, ledExplicit, ledUnpinned, ledNew := workload.NewLedger(), workload.NewLedger(), workload.NewLedger(), workload.NewLedger()
	pubDefault := newClient("pub-default")
	pubUnpinned := newClient("pub-unpinned", unpinned)
	loads := []*optLoad{
		startOptLoad(e.ctx, pubDefault, stream, "ir-default", 2, ledDefault),
		startOptLoad(e.ctx, newClient("pub-explicit"), stream, "ir-explicit", 2, ledExplicit, client.WithStreamID(id1)),
		startOptLoad(e.ctx, pubUnpinned, stream, "ir-unpinned", 2, ledUnpinned),
	}
	stopLoads := func() {
		for _, l := range loads {
			l.stop()
		}
	}
	defer stopLoads()
	ctx, cancel := context.WithTimeout(e.ctx, waitLong)
	defer cancel()
	if err := ledDefault.WaitCount(ctx, 30, workload.ConfirmedAt(1)); err != nil {
		t.Fatal(err)
	}

	// Readers of the first incarnation, from its head.
	startReader := func(cl *client.Client, cfg readerConfig) *offsetReader {
		t.Helper()
		cfg.terminal = isStreamReplaced
		r, err := startOffsetReader(e.ctx, cl, stream, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.stop)
		return r
	}
	rdClient := newClient("read-default")
	r1Default := startReader(rdClient, readerConfig{name: "first-default", start: "earliest"})
	r1Explicit := startReader(newClient("read-explicit"), readerConfig{name: "first-explicit", start: "earliest",
		opts: []client.ReadOption{client.FromStreamID(id1)}})
	r1Unpinned := startReader(newClient("read-unpinned", unpinned), readerConfig{name: "first-unpinned", start: "earliest"})
	for _, l := range []*workload.Ledger{ledDefault, ledExplicit, ledUnpinned} {
		if err := l.WaitCount(ctx, 100, workload.ConfirmedAt(1)); err != nil {
			t.Fatal(err)
		}
	}
	if got := pubDefault.PinnedStreamID(stream); got != id1 {
		t.Errorf("the default producer's client is pinned to stream id %d after its confirms, want %d", got, id1)
	}
	if got := rdClient.PinnedStreamID(stream); got != id1 {
		t.Errorf("the default reader's client is pinned to stream id %d after its first fetch, want %d", got, id1)
	}
	if got := pubUnpinned.PinnedStreamID(stream); got != 0 {
		t.Errorf("a client without pinning is pinned to stream id %d", got)
	}

	// Pause the owner, delete the stream and create it again.
	paused := true
	e.signal(e.host(oldOwner), syscall.SIGSTOP)
	pausedAt := time.Now()
	defer func() {
		if paused {
			e.signal(e.host(oldOwner), syscall.SIGCONT)
		}
	}()
	if _, err := e.cl.DeleteStream(e.ctx, stream); err != nil {
		t.Fatalf("delete %s: %v", stream, err)
	}
	deleted := time.Now()
	e.logf("deleted %s (id %d) while its owner %s is paused", stream, id1, oldOwner)
	// The coordinators place a new stream on live hosts only; the paused
	// host stays live until its heartbeats expire.
	e.poll(oldOwner+" expired", waitLong, func(ctx context.Context) (bool, string, error) {
		ci, err := e.c.Client().ClusterInfo(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range ci.Nodes {
			if n.Node == oldOwner {
				return n.State == wire.NodeExpired, n.State, nil
			}
		}
		return false, "not listed", nil
	})
	second := e.createStream(stream, 3)
	id2 := second.StreamID
	if id2 == id1 || id2 == 0 {
		t.Fatalf("the new stream has id %d, the deleted one had %d", id2, id1)
	}
	if second.Assignment.Includes(oldOwner) {
		t.Fatalf("the new stream was placed on the paused host %s: %+v", oldOwner, second.Assignment)
	}

	// A producer and readers of the new incarnation start while the old
	// owner is still paused, so that the first reply they get is the new
	// stream's.
	pubNew := newClient("pub-new")
	loads = append(loads, startOptLoad(e.ctx, pubNew, stream, "ir-new", 2, ledNew))
	r2Default := startReader(newClient("read-new-default"), readerConfig{name: "second-default", start: "earliest"})
	r2Explicit := startReader(newClient("read-new-explicit"), readerConfig{name: "second-explicit", start: "earliest",
		opts: []client.ReadOption{client.FromStreamID(id2)}})

	// The new stream grows well past the old one's end, so that a reader
	// going on by offset from the old stream's end finds records there.
	var end1 uint64
	for _, l := range []*workload.Ledger{ledDefault, ledExplicit, ledUnpinned} {
		for _, o := range l.Outcomes() {
			if o.Confirm.StreamID == id1 {
				end1 = max(end1, o.Confirm.Offset+1)
			}
		}
	}
	e.poll(fmt.Sprintf("the new stream past offset %d", end1+150), waitLong, func(ctx context.Context) (bool, string, error) {
		var top uint64
		for _, l := range []*workload.Ledger{ledNew, ledUnpinned} {
			for _, o := range l.Outcomes() {
				if o.Confirmed && o.Confirm.StreamID == id2 {
					top = max(top, o.Confirm.Offset+1)
				}
			}
		}
		return top >= end1+150, fmt.Sprintf("confirmed up to %d", top), nil
	})
	if d := time.Since(pausedAt); d < requestTimeout+500*time.Millisecond {
		// A request the old owner had not answered when it was paused
		// is abandoned by its client after requestTimeout; wait for that
		// so that any old-stream confirm received later was sent after
		// the owner woke.
		sleepCtx(e.ctx, requestTimeout+500*time.Millisecond-d)
	}
	e.signal(e.host(oldOwner), syscall.SIGCONT)
	woke := time.Now()
	paused = false
	e.logf("%s held for %v across the delete and the create", oldOwner, time.Since(pausedAt).Round(time.Millisecond))
	e.poll(oldOwner+" live again", waitLong, func(ctx context.Context) (bool, string, error) {
		ci, err := e.c.Client().ClusterInfo(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range ci.Nodes {
			if n.Node == oldOwner {
				return n.State == wire.NodeLive, n.State, nil
			}
		}
		return false, "not listed", nil
	})
	// The woken owner meets the load for a while.
	sleepCtx(e.ctx, 1500*time.Millisecond)
	stopLoads()

	// The new stream's content, read by its id to the owner's confirmed
	// watermark once nothing is published any more.
	var wm2 uint64
	e.poll("the new stream's confirmed watermark", 15*time.Second, func(ctx context.Context) (bool, string, error) {
		b, err := e.cl.Fetch(ctx, stream, wire.FetchRequest{Start: "earliest", MaxRecords: 1}, client.FromStreamID(id2))
		if err != nil {
			return false, err.Error(), nil
		}
		wm2 = b.Confirmed
		return true, "", nil
	})
	var end2 uint64
	for _, l := range []*workload.Ledger{ledDefault, ledExplicit, ledUnpinned, ledNew} {
		for _, o := range l.Outcomes() {
			if o.Confirm.StreamID == id2 {
				end2 = max(end2, o.Confirm.Offset+1)
			}
		}
	}
	end2 = max(end2, wm2)
	ref := startReader(newClient("read-reference"), readerConfig{name: "reference", start: "earliest",
		opts: []client.ReadOption{client.FromStreamID(id2)}})
	if err := ref.waitPosition(end2, 20*time.Second); err != nil {
		t.Fatalf("read the new stream by its id %d to %d: %v", id2, end2, err)
	}
	for _, r := range []*offsetReader{r2Default, r2Explicit, r1Unpinned} {
		if err := r.waitPosition(end2, 10*time.Second); err != nil {
			t.Errorf("reader %s did not reach the new stream's end %d: %v", r.cfg.name, end2, err)
		}
	}
	// The first incarnation's readers had all the time the others had.
	readers := []*offsetReader{r1Default, r1Explicit, r1Unpinned, r2Default, r2Explicit, ref}
	for _, r := range readers[:5] {
		r.stop()
	}
	// A publish the stop cut short may still be confirmed after the
	// watermark above was read, and a reader may have read it: the
	// reference reads as far as any reader did before it stops.
	var far uint64
	for _, r := range readers[:5] {
		far = max(far, r.result().next)
	}
	if err := ref.waitPosition(far, 20*time.Second); err != nil {
		t.Fatalf("read the new stream by its id %d to %d, where the readers stopped: %v", id2, far, err)
	}
	ref.stop()
	newData := ref.result().data
	e.logf("first stream id %d ended at %d; second stream id %d confirmed up to %d (watermark %d)", id1, end1, id2, end2, wm2)

	// Confirms.
	all := map[string]*workload.Ledger{"default": ledDefault, "explicit-id": ledExplicit, "unpinned": ledUnpinned, "new-default": ledNew}
	for _, name := range []string{"default", "explicit-id", "unpinned", "new-default"} {
		led := all[name]
		byID := map[uint64]int{}
		replaced := 0
		var late []string
		for _, o := range led.Outcomes() {
			if o.Confirm.StreamID != 0 || o.Confirmed {
				byID[o.Confirm.StreamID]++
				if o.Confirm.StreamID != id1 && o.Confirm.StreamID != id2 {
					t.Errorf("producer %s: %s confirmed at offset %d with stream id %d, neither %d nor %d",
						name, o.ID, o.Confirm.Offset, o.Confirm.StreamID, id1, id2)
				}
				// The old owner was stopped from before the delete until
				// it woke: a confirm the client took in between was sent
				// before the delete began (a loaded client may take it
				// after the delete returned). One taken after the owner
				// woke was sent after the delete.
				if o.Confirm.StreamID == id1 && o.Done.After(woke) && len(late) < 10 {
					late = append(late, fmt.Sprintf("%s at offset %d epoch %d, %v after the delete, %v after the owner woke",
						o.ID, o.Confirm.Offset, o.Confirm.Epoch, o.Done.Sub(deleted).Round(time.Millisecond),
						o.Done.Sub(woke).Round(time.Millisecond)))
				}
			}
			if isStreamReplaced(o.Err) {
				replaced++
			}
		}
		e.logf("producer %s: %v; confirms by stream id %v; %d ErrStreamReplaced", name, led.Stats(), byID, replaced)
		if len(late) > 0 {
			t.Errorf("producer %s got confirms of the deleted stream %d after its owner woke from a pause across the delete: %s", name, id1, strings.Join(late, "; "))
		}
		switch name {
		case "default", "explicit-id":
			if byID[id2] > 0 {
				t.Errorf("producer %s (started on stream id %d) got %d confirms of the new stream %d: a pinned client moved to another incarnation",
					name, id1, byID[id2], id2)
			}
			if byID[id1] == 0 {
				t.Errorf("producer %s got no confirm of the first stream", name)
			}
		case "new-default":
			if byID[id1] > 0 || byID[id2] == 0 {
				t.Errorf("producer %s (started on the new stream) got confirms %v, want only stream id %d", name, byID, id2)
			}
		}
		if name == "default" && replaced == 0 {
			t.Errorf("the default (pinned) producer never got ErrStreamReplaced after the stream was created again; errors %v", led.Stats().Errors)
		}
		for _, o := range led.Outcomes() {
			if !o.Confirmed || o.Confirm.StreamID != id2 {
				continue
			}
			if d, ok := newData[o.Confirm.Offset]; !ok || string(d) != string(o.Data) {
				t.Errorf("producer %s: %s confirmed at offset %d of the new stream, which holds %.40q there", name, o.ID, o.Confirm.Offset, d)
			}
		}
	}
	if got := pubNew.PinnedStreamID(stream); got != id2 {
		t.Errorf("the new default producer's client is pinned to %d, want %d", got, id2)
	}

	// Readers: which incarnation each record handed out belongs to. The
	// new stream had no failover, so what its owner served is in ref at
	// the same offset; anything else came from the deleted stream.
	type split struct{ old, cur []uint64 }
	classify := func(r *offsetReader) (readerResult, split) {
		res := r.result()
		var s split
		for off, d := range res.data {
			if nd, ok := newData[off]; ok && string(nd) == string(d) {
				s.cur = append(s.cur, off)
			} else {
				s.old = append(s.old, off)
			}
		}
		slices.Sort(s.old)
		slices.Sort(s.cur)
		return res, s
	}
	span := func(offs []uint64) string {
		if len(offs) == 0 {
			return "none"
		}
		return fmt.Sprintf("%d at offsets %d..%d", len(offs), offs[0], offs[len(offs)-1])
	}
	for _, r := range []*offsetReader{r1Default, r1Explicit, r1Unpinned, r2Default, r2Explicit} {
		res, s := classify(r)
		e.logf("reader %s: %d replies, position %d, deleted stream's records %s, new stream's records %s; last error: %v",
			r.cfg.name, res.replies, res.next, span(s.old), span(s.cur), res.lastErr)
		switch r {
		case r1Unpinned:
			if len(s.cur) == 0 || len(s.old) == 0 {
				t.Errorf("the unpinned reader did not go on from the deleted stream into the new one (old %s, new %s): the test did not set up the hazard it checks",
					span(s.old), span(s.cur))
			}
		case r1Default, r1Explicit:
			if len(s.old) == 0 {
				t.Errorf("reader %s read nothing of the first stream", r.cfg.name)
			}
			if len(s.cur) > 0 {
				t.Errorf("reader %s, which started on stream id %d, was handed records of both incarnations: the deleted stream's %s, then the new stream's %s",
					r.cfg.name, id1, span(s.old), span(s.cur))
			}
			if !isStreamReplaced(res.lastErr) && !isNotFound(res.lastErr) {
				t.Errorf("reader %s did not end with ErrStreamReplaced or not_found: last error %v (ended: %v)", r.cfg.name, res.lastErr, res.err)
			}
		default:
			if len(s.old) > 0 {
				t.Errorf("reader %s, which started on the new stream id %d, was handed records of the deleted one: %s (and the new stream's %s)",
					r.cfg.name, id2, span(s.old), span(s.cur))
			}
			if res.err != nil {
				t.Errorf("reader %s of the new stream ended with %v", r.cfg.name, res.err)
			}
		}
		if len(res.problems) > 0 {
			t.Errorf("reader %s: %s", r.cfg.name, strings.Join(res.problems, "; "))
		}
	}
}

// isStreamReplaced reports whether err is client.ErrStreamReplaced.
func isStreamReplaced(err error) bool { return errors.Is(err, client.ErrStreamReplaced) }

// isNotFound reports whether err says the stream does not exist (any more).
func isNotFound(err error) bool {
	return errors.Is(err, client.ErrNoSuchStream) || wire.CodeOf(err) == wire.CodeNotFound
}

// optLoad publishes from a few publishers with publish options until
// stopped, recording every outcome; a confirm that came back with an
// error (a pinned client's confirm from another incarnation) keeps its
// confirm in Outcome.Confirm with Confirmed false.
type optLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startOptLoad(ctx context.Context, cl *client.Client, stream, name string, publishers int, led *workload.Ledger, opts ...client.PublishOption) *optLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &optLoad{cancel: cancel}
	for i := range publishers {
		producer := fmt.Sprintf("%s-p%d", name, i)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for seq := uint64(0); ctx.Err() == nil; seq++ {
				id := workload.ID{Producer: producer, Seq: seq}
				data := workload.Payload(id, 64)
				o := workload.Outcome{ID: id, Data: data, Sent: time.Now()}
				pc, err := cl.Publish(ctx, stream, data, append([]client.PublishOption{client.WithProducer(producer, seq)}, opts...)...)
				o.Done, o.Confirm = time.Now(), pc
				if err == nil {
					o.Confirmed = true
				} else {
					o.Err, o.Stopped = err, ctx.Err() != nil
				}
				_ = led.Record(o)
				pause := 5 * time.Millisecond
				if err != nil && o.Done.Sub(o.Sent) < 50*time.Millisecond {
					pause = 50 * time.Millisecond
				}
				sleepCtx(ctx, pause)
			}
		}()
	}
	return l
}

func (l *optLoad) stop() {
	l.cancel()
	l.wg.Wait()
}
