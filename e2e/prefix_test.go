package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// prefixWait is the state of a stream whose recovery waits for the
// confirmed prefix: its first owner died, the copy that took over died
// right after, and the only copy left lags behind the start of the
// takeover.
type prefixWait struct {
	stream string
	epoch  uint64 // the first assignment's epoch
	first  string // the first owner, dead
	took   string // the copy that took over at epoch+1, dead
	lagger string // the copy left, behind the start
	start  wire.HistoryStart
	led    *workload.Ledger
	load   *workload.Load
}

// setupPrefixWait drives a 3-copy stream under load into a recovery that
// waits for the confirmed prefix:
//
//  1. one follower (the lagger) is paused while the owner and the other
//     follower go on confirming, so it falls behind;
//  2. the owner is killed; the lagger is continued (its owner is dead, so
//     it cannot catch up) and answers the seal; the other follower, with
//     the furthest tail, is promoted at epoch+1 and its start recorded;
//  3. the promoted copy is paused the moment its assignment notice goes
//     out and killed once stream.info shows it owner: the lagger, its only
//     follower, never fetched from it. The next recovery (R=1 of the two
//     copies at epoch+1) gets the lagger's seal, whose tail is below the
//     start, and waits for the confirmed prefix.
//
// The load keeps running throughout.
func setupPrefixWait(e *env, stream string) *prefixWait {
	t := e.t
	t.Helper()
	before := e.createStream(stream, 3)
	pw := &prefixWait{
		stream: stream,
		epoch:  before.Assignment.Epoch,
		first:  before.Assignment.Owner,
		took:   before.Assignment.Followers[0],
		lagger: before.Assignment.Followers[1],
		led:    workload.NewLedger(),
	}
	pw.load = e.load(stream, "pw", pw.led)
	t.Cleanup(func() { _ = pw.load.Stop() })
	e.waitConfirms(pw.led, 150, pw.epoch)

	// 1. The lagger falls behind.
	e.signal(e.host(pw.lagger), syscall.SIGSTOP)
	e.waitConfirms(pw.led, 150, pw.epoch)

	// Watch the promoted copy's notices before anything moves.
	killed := e.spyPromotion(stream, pw.took, pw.epoch+1)

	// 2. The owner dies; once the coordinators record the recovery, its
	// subscriptions are gone, and the lagger may wake up.
	e.signal(e.host(pw.first), syscall.SIGKILL)
	e.waitInfo(stream, "a recovery recorded for "+stream, func(i wire.StreamInfo) (bool, error) {
		return i.Recovery != nil || i.Assignment.Epoch > pw.epoch, nil
	})
	e.signal(e.host(pw.lagger), syscall.SIGCONT)

	// 3. The spy kills the promoted copy as soon as it owns the stream.
	select {
	case err := <-killed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLong):
		t.Fatalf("%s was never promoted at epoch %d: %s", pw.took, pw.epoch+1, describe(e.info(stream)))
	}
	e.logf("killed %s right after it took %s over at epoch %d", pw.took, stream, pw.epoch+1)

	info := e.waitInfo(stream, stream+" waiting for the confirmed prefix", func(i wire.StreamInfo) (bool, error) {
		if i.Assignment.Epoch > pw.epoch+1 {
			return false, fmt.Errorf("the stream moved to epoch %d without waiting: %s had caught up before %s died",
				i.Assignment.Epoch, pw.lagger, pw.took)
		}
		return i.Recovery != nil && i.Recovery.Wait != nil && i.Recovery.Wait.Kind == "confirmed_prefix", nil
	})
	if len(info.Starts) == 0 {
		t.Fatalf("no history start after the first failover: %s", describe(info))
	}
	pw.start = info.Starts[len(info.Starts)-1]
	w := info.Recovery.Wait
	if pw.start.Epoch != pw.epoch+1 || pw.start.Node != pw.took {
		t.Fatalf("latest start %+v, want the takeover of %s at epoch %d", pw.start, pw.took, pw.epoch+1)
	}
	if w.Start == nil || *w.Start != pw.start || w.BestNode != pw.lagger || w.BestTail >= pw.start.RecordTail {
		t.Fatalf("the wait %+v does not name the start %+v and %s below it", *w, pw.start, pw.lagger)
	}
	if info.Status != wire.StatusWaiting {
		t.Fatalf("status %q while the recovery waits, want %q", info.Status, wire.StatusWaiting)
	}
	e.logf("recovery waits for the confirmed prefix: start %+v, best %s at %d", pw.start, w.BestNode, w.BestTail)
	return pw
}

// spyPromotion pauses node each time the coordinator leader sends it an
// assignment notice, looks at stream.info, and kills it if it now owns
// stream at epoch; otherwise it lets it go on. A notice goes out right
// after the commit; the host must still pull and apply the snapshot, and
// its followers must then fetch from it, so the pause lands before any
// follower got a record from it. The returned channel gets nil once node
// is killed, or an error.
func (e *env) spyPromotion(stream, node string, epoch uint64) <-chan error {
	t := e.t
	t.Helper()
	// The spy listens as the node itself: only host <node> may subscribe
	// to its assignment notices.
	nopts, err := e.c.NATSOptions(auth.HostPrincipal(node))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.c.NATSURL(), append(nopts, nats.Name("brook-e2e-spy"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p := e.host(node)
	done := make(chan error, 1)
	var finished bool
	sub, err := nc.Subscribe(wire.AssignNoticeSubject(node), func(m *nats.Msg) {
		if finished {
			return
		}
		var n wire.AssignNotice
		_ = json.Unmarshal(m.Data, &n)
		if err := e.c.Kill(p, syscall.SIGSTOP); err != nil {
			finished = true
			done <- fmt.Errorf("pause %s on notice %d: %w", node, n.Version, err)
			return
		}
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		info, err := e.c.StreamInfo(ctx, stream)
		cancel()
		if err == nil && info.Assignment.Epoch == epoch && info.Assignment.Owner == node {
			finished = true
			if err := e.c.Kill(p, syscall.SIGKILL); err != nil {
				done <- fmt.Errorf("kill %s: %w", node, err)
				return
			}
			done <- nil
			return
		}
		if err := e.c.Kill(p, syscall.SIGCONT); err != nil {
			finished = true
			done <- fmt.Errorf("continue %s: %w", node, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return done
}

// waitPrefixEntry waits until the attention list shows the recovery
// waiting for pw's confirmed prefix, with the start's record count and
// the node that took over there; then until it also names the lagger as
// the best copy, with the records it misses.
func (e *env) waitPrefixEntry(pw *prefixWait) wire.AttentionEntry {
	e.t.Helper()
	entry := e.waitEntry(wire.AttentionWaitPrefix, pw.stream, func(en wire.AttentionEntry) bool { return true })
	if entry.Node != pw.took {
		e.t.Fatalf("entry %s names node %q, want %s, which took over at the start", jsonString(entry), entry.Node, pw.took)
	}
	if n, ok := figure(entry, "start_record_tail"); !ok || n != pw.start.RecordTail {
		e.t.Fatalf("entry %s: start_record_tail %v, want %d", jsonString(entry), entry.Figures["start_record_tail"], pw.start.RecordTail)
	}
	if n, ok := figure(entry, "start_epoch"); !ok || n != pw.start.Epoch {
		e.t.Fatalf("entry %s: start_epoch %v, want %d", jsonString(entry), entry.Figures["start_epoch"], pw.start.Epoch)
	}
	if entry.Severity != wire.SeverityCritical {
		e.t.Fatalf("entry %s: severity %q", jsonString(entry), entry.Severity)
	}
	e.logf("attention: %s", entry.Headline)
	// Attention judges liveness from heartbeats: for up to a ttl after
	// the kill, the dead node's last heartbeat still counts as live, and
	// the entry may name it as the best copy. Once it is judged down, the
	// lagger is the best copy and the figures say what it misses.
	entry = e.waitEntry(wire.AttentionWaitPrefix, pw.stream, func(en wire.AttentionEntry) bool {
		best, _ := en.Figures["best_node"].(string)
		return best == pw.lagger
	})
	if n, ok := figure(entry, "missing_records"); !ok || n == 0 || n >= pw.start.RecordTail {
		e.t.Fatalf("entry %s: missing_records %v, want between 1 and %d", jsonString(entry), entry.Figures["missing_records"], pw.start.RecordTail-1)
	}
	e.logf("attention: %s", entry.Headline)
	return entry
}

// waitEntry waits until the attention list holds an entry of kind about
// stream for which ok holds.
func (e *env) waitEntry(kind, stream string, ok func(wire.AttentionEntry) bool) wire.AttentionEntry {
	e.t.Helper()
	var entry wire.AttentionEntry
	e.poll("attention: "+kind+" about "+stream, waitLong, func(ctx context.Context) (bool, string, error) {
		l, err := e.attention(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		en, found := findEntry(l, kind, stream)
		if !found {
			return false, "entries: " + entryKinds(l), nil
		}
		entry = en
		return ok(en), "entry: " + jsonString(en), nil
	})
	return entry
}

// waitNoEntry waits until the attention list has no entry of kind about
// stream.
func (e *env) waitNoEntry(kind, stream string) {
	e.t.Helper()
	e.poll("attention without "+kind, waitLong, func(ctx context.Context) (bool, string, error) {
		l, err := e.attention(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		_, ok := findEntry(l, kind, stream)
		return !ok, "entries: " + entryKinds(l), nil
	})
}

// TestKillNewOwner: SIGKILL the new owner right after a failover. The next
// recovery must not promote the copy left, which lags behind the start of
// the takeover (records confirmed before it may exist only on the dead new
// owner): it waits for the confirmed prefix, and the attention service
// lists the wait with the start's record count and the node that took
// over. Restarting that node completes the recovery without an operator,
// promoting a copy at or past the start; the entry goes away; no confirmed
// record is lost.
//
// It catches: a recovery that promotes the furthest answering copy below
// the confirmed prefix (losing confirmed records), a missing or wrong
// attention entry, an entry that stays after the recovery, and history
// starts that do not grow.
func TestKillNewOwner(t *testing.T) {
	e := newEnv(t, opts{attention: true})
	pw := setupPrefixWait(e, "new-owner")
	e.waitPrefixEntry(pw)

	e.restart(e.host(pw.took))
	done := e.waitInfo(pw.stream, pw.stream+" recovered past the wait", func(i wire.StreamInfo) (bool, error) {
		return i.Status == wire.StatusServing && i.Assignment.Epoch == pw.epoch+2, nil
	})
	last := done.Starts[len(done.Starts)-1]
	if last.Epoch != pw.epoch+2 || last.RecordTail < pw.start.RecordTail {
		t.Fatalf("the recovery promoted %s at %+v, below the confirmed prefix %+v", done.Assignment.Owner, last, pw.start)
	}
	if done.Assignment.Owner != pw.took {
		t.Fatalf("promoted %s; only %s holds the prefix", done.Assignment.Owner, pw.took)
	}
	e.logf("recovered: %s owns at epoch %d from %+v", done.Assignment.Owner, done.Assignment.Epoch, last)
	e.waitNoEntry(wire.AttentionWaitPrefix, pw.stream)
	e.waitConfirms(pw.led, 100, pw.epoch+2)

	// The first owner comes back too: it follows the history of the new
	// epoch, cut at the start.
	e.restart(e.host(pw.first))
	e.waitFollower(pw.stream, pw.first, pw.epoch+2)
	e.waitConfirms(pw.led, 100, pw.epoch+2)

	e.stopLoad(pw.load, pw.led)
	e.waitCaughtUp(pw.stream, pw.lagger)
	e.waitCaughtUp(pw.stream, pw.first)
	rd := workload.NewReader(e.cl, pw.stream, "new-owner-reader")
	e.verify(pw.stream, pw.led, rd, workload.CheckConfig{})
}
