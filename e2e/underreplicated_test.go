package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/telemetry/metricstest"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/tools/auth"
)

// TestDoubleKillUnderReplicated is issue 15's double kill without a floor:
// two hosts of a 3-copy majority_durable stream are SIGKILLed one after the
// other (the owner, then the owner that replaced it), so the stream serves
// on one copy with W=1, as the seed's rule for W says. That is now visible:
// stream.info, the attention list (under_replicated, critical: one more
// loss would lose confirmed records) and the coordinator's gauges say so,
// after the first kill already (2 copies, W=2, a warning), and all three
// clear once the killed hosts are back and the assignment holds 3 copies.
// Every confirmed record is read back.
func TestDoubleKillUnderReplicated(t *testing.T) {
	doubleKill(t, 0)
}

// TestDoubleKillMinCopies is the same double kill with min_copies 2: on
// one copy the owner refuses every publish with not_enough_copies (a
// client that does not retry sees the code; the load's clients retry it),
// nothing is confirmed at the one-copy epoch, attention says publishes are
// refused, and the publishes go on being confirmed once the killed hosts
// are back. Every confirmed record is read back, each held by at least 2
// copies.
func TestDoubleKillMinCopies(t *testing.T) {
	doubleKill(t, 2)
}

func doubleKill(t *testing.T, minCopies int) {
	// No fresh node replaces a lost copy during the test: the stream stays
	// short until the killed hosts return.
	e := newEnv(t, opts{attention: true, coordArgs: []string{"--replace-after", "5m"}, timeout: 2 * time.Minute})
	stream := "double-kill"
	if minCopies > 0 {
		stream = fmt.Sprintf("double-kill-min%d", minCopies)
	}
	if _, err := e.cl.CreateStream(e.ctx, wire.StreamCreate{Stream: stream, Copies: 3, MinCopies: minCopies}); err != nil {
		t.Fatalf("create %s: %v", stream, err)
	}
	first := e.waitInfo(stream, stream+" serving on 3 copies", func(i wire.StreamInfo) (bool, error) {
		return i.Status == wire.StatusServing && len(i.Assignment.Copies()) == 3, nil
	})
	if first.MinCopies != minCopies || first.UnderReplicated != nil {
		t.Fatalf("created %s", describe(first))
	}
	owner1 := first.Assignment.Owner

	led := workload.NewLedger()
	ld := e.load(stream, "dk", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, first.Assignment.Epoch)

	// First kill: the owner. The stream serves on 2 copies, W=2.
	e.signal(e.host(owner1), syscall.SIGKILL)
	second := e.waitServingAt(stream, first.Assignment.Epoch+1, owner1)
	owner2 := second.Assignment.Owner
	if u := second.UnderReplicated; len(second.Assignment.Copies()) != 2 || u == nil || u.Copies != 2 || u.W != 2 || u.LossLosesConfirmed || u.PublishesRefused {
		t.Fatalf("after the first kill: %s, under-replicated %+v", describe(second), u)
	}
	e.waitConfirms(led, 100, second.Assignment.Epoch)
	e.waitUnderReplicated(stream, 2, false, false)

	// Second kill: the new owner. One copy is left, W=1.
	e.signal(e.host(owner2), syscall.SIGKILL)
	third := e.waitServingAt(stream, second.Assignment.Epoch+1, owner2)
	oneCopy := third.Assignment.Epoch
	if u := third.UnderReplicated; len(third.Assignment.Copies()) != 1 || u == nil || u.Copies != 1 || u.W != 1 ||
		!u.LossLosesConfirmed || u.PublishesRefused != (minCopies > 1) || u.SinceMS != second.UnderReplicated.SinceMS {
		t.Fatalf("after the second kill: %s, under-replicated %+v (first short at %d)", describe(third), u, second.UnderReplicated.SinceMS)
	}
	e.logf("%s serves on %s alone at epoch %d", stream, third.Assignment.Owner, oneCopy)
	if minCopies > 1 {
		e.refusedBelowFloor(stream)
		// The load's publishers keep retrying; nothing is confirmed on one copy.
		time.Sleep(time.Second)
	} else {
		e.waitConfirms(led, 100, oneCopy)
	}
	e.waitUnderReplicated(stream, 1, true, minCopies > 1)

	// Both hosts back: placement adds their copies again.
	e.restart(e.host(owner1))
	e.restart(e.host(owner2))
	back := e.waitInfo(stream, stream+" on 3 copies again", func(i wire.StreamInfo) (bool, error) {
		return i.Status == wire.StatusServing && len(i.Assignment.Copies()) == 3, nil
	})
	if back.UnderReplicated != nil {
		t.Fatalf("3 of 3 copies, still under-replicated: %+v", *back.UnderReplicated)
	}
	e.waitConfirms(led, 100, back.Assignment.Epoch)
	e.waitUnderReplicated(stream, 0, false, false)
	e.stopLoad(ld, led)

	atOneCopy := led.Count(func(o workload.Outcome) bool { return o.Confirmed && o.Confirm.Epoch == oneCopy })
	if minCopies > 1 && atOneCopy != 0 {
		t.Fatalf("%d publishes were confirmed on one copy under min_copies %d", atOneCopy, minCopies)
	}
	if minCopies == 0 && atOneCopy == 0 {
		t.Fatal("nothing was confirmed on one copy without a floor")
	}
	rd := workload.NewReader(e.cl, stream, "double-kill-reader")
	e.verify(stream, led, rd, workload.CheckConfig{MinCopies: func(epoch uint64) int {
		if epoch == oneCopy {
			return 1 // W of a one-copy assignment, without a floor
		}
		return 2
	}})
}

// refusedBelowFloor publishes once, without retrying, to a stream whose
// assignment is below its min_copies: the owner answers not_enough_copies.
func (e *env) refusedBelowFloor(stream string) {
	e.t.Helper()
	once, err := client.Connect(e.ctx, e.c.NATSURL(), append(e.c.ClientOptions(auth.Client), client.WithName("brook-e2e-once"),
		client.WithRequestTimeout(requestTimeout), client.WithRetry(1, 0))...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = once.Close() }()
	e.poll("a publish refused with not_enough_copies", waitLong, func(ctx context.Context) (bool, string, error) {
		pc, err := once.Publish(ctx, stream, []byte("below the floor"))
		if err == nil {
			return false, "", fmt.Errorf("confirmed below the floor: %+v", pc)
		}
		we := wireError(err)
		if we == nil || we.Code != wire.CodeNotEnoughCopies {
			return false, err.Error(), nil // the owner not serving yet
		}
		e.logf("publish refused: %v", we)
		return true, "", nil
	})
}

// waitUnderReplicated waits until attention and a coordinator's gauges say
// what stream.info says of stream: under-replicated on copies copies
// (0: not at all), whether one more loss would lose confirmed records and
// whether publishes are refused.
func (e *env) waitUnderReplicated(stream string, copies int, atRisk, refused bool) {
	e.t.Helper()
	e.poll(fmt.Sprintf("attention on %s under-replicated on %d copies", stream, copies), waitLong, func(ctx context.Context) (bool, string, error) {
		l, err := e.attention(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		en, ok := findEntry(l, wire.AttentionUnderRepl, stream)
		if copies == 0 {
			return !ok, entryKinds(l), nil
		}
		if !ok {
			return false, entryKinds(l), nil
		}
		n, _ := figure(en, "copies")
		w, _ := figure(en, "w")
		wantSev := wire.SeverityWarning
		if atRisk || refused {
			wantSev = wire.SeverityCritical
		}
		return n == uint64(copies) && en.Figures["loss_loses_confirmed"] == atRisk && en.Figures["publishes_refused"] == refused &&
			en.Severity == wantSev && (w == 1) == atRisk, en.Headline, nil
	})
	want := map[string]float64{"brook_coordinator_stream_under_replicated": 0, "brook_coordinator_stream_under_replicated_at_risk": 0}
	if copies > 0 {
		want["brook_coordinator_stream_under_replicated"] = 1
		if atRisk {
			want["brook_coordinator_stream_under_replicated_at_risk"] = 1
		}
	}
	e.poll("the coordinators' under-replication gauges", waitLong, func(ctx context.Context) (bool, string, error) {
		for i := range e.c.Coordinators() {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			f, err := metricstest.Scrape(sctx, e.c.Coordinator(i).MetricsURL())
			cancel()
			if err != nil {
				return false, err.Error(), nil
			}
			for name, v := range want {
				if got, _ := f.Value(name); got != v {
					return false, fmt.Sprintf("coordinator %d: %s = %v, want %v", i+1, name, got, v), nil
				}
			}
		}
		return true, "", nil
	})
	if copies > 0 {
		e.logf("%s under-replicated on %d copies: attention and metrics agree (at risk %v, refused %v)", stream, copies, atRisk, refused)
	}
}
