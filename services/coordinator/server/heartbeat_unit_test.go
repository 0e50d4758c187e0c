package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/controller"
	"github.com/brook-streams/brook/services/coordinator/internal/testutil"
	"github.com/brook-streams/brook/services/coordinator/liveness"
)

// TestHeartbeatNotedWhileDecodingIsBusy: a heartbeat is proof of life when
// it arrives, whatever the decoding of earlier ones costs: with the decoder
// held (as by a full report of thousands of copies on a loaded machine),
// a liveness beat still moves the host's last-seen time at once, and is
// recorded with its arrival time once the decoder is free. Past the queue's
// bound a beat is dropped after its proof of life is noted.
func TestHeartbeatNotedWhileDecodingIsBusy(t *testing.T) {
	var now atomic.Int64
	now.Store(1_000_000)
	s := &Server{
		opt:         Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }},
		log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		live:        liveness.New(),
		hbDec:       heartbeat.NewDecoder(),
		kick:        make(chan struct{}, 1),
		reports:     make(chan heard, maxQueuedReports),
		reportsDone: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-s.reportsDone }()
	go s.reportLoop(ctx)
	beat := func(n uint64, live bool) *nats.Msg {
		data, _ := json.Marshal(wire.Heartbeat{Node: "h1", Incarnation: 7, Beat: n, Live: live, Copies: []wire.CopyStatus{}})
		return &nats.Msg{Subject: wire.HeartbeatSubject("h1"), Data: data}
	}
	seen := func() time.Time { return s.live.View()["h1"].LastSeen }
	s.onHeartbeat(beat(1, false))
	waitFor(t, "the first beat recorded", func() bool { return seen().Equal(time.UnixMilli(1_000_000)) })

	s.hbMu.Lock() // the decoder is busy
	now.Store(1_000_700)
	done := make(chan struct{})
	go func() { s.onHeartbeat(beat(2, true)); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.hbMu.Unlock()
		t.Fatal("a heartbeat waited for the decoder")
	}
	if got := seen(); !got.Equal(time.UnixMilli(1_000_700)) {
		s.hbMu.Unlock()
		t.Fatalf("last seen %v while the decoder was busy, want the beat's arrival", got)
	}
	// Fill the queue past its bound: the beats are still proof of life.
	for i := range maxQueuedReports + 5 {
		now.Store(1_000_800 + int64(i))
		s.onHeartbeat(beat(uint64(3+i), true))
	}
	if got, want := seen(), time.UnixMilli(1_000_800+maxQueuedReports+4); !got.Equal(want) {
		s.hbMu.Unlock()
		t.Fatalf("last seen %v with the queue full, want %v", got, want)
	}
	if s.reportsDropped.Load() == 0 {
		s.hbMu.Unlock()
		t.Fatal("no beat dropped past the queue's bound")
	}
	s.hbMu.Unlock()
	// Decoded later, a beat does not move the time back.
	now.Store(1_000_900)
	waitFor(t, "queued beats decoded", func() bool { return len(s.reports) == 0 })
	if got := seen(); got.Before(time.UnixMilli(1_000_800 + maxQueuedReports + 4)) {
		t.Fatalf("last seen moved back to %v", got)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestStallIsOwnSilence: a gap in this process's own running (its watch's
// ticks received far apart) counts as not hearing: the controller expires
// no host for a silence that began before the stall until a TTL after
// it, and the stall is lateness the liveness probe's wait allows for;
// ticks at their pace change nothing.
func TestStallIsOwnSilence(t *testing.T) {
	fake := time.UnixMilli(5_000_000)
	s := &Server{opt: Options{TTL: 800 * time.Millisecond, Now: func() time.Time { return fake }},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), live: liveness.New()}
	var mono atomic.Int64 // the watch's clock, in ms
	clock := func() time.Time { return time.UnixMilli(mono.Load()) }
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.stallWatch(ctx, ticks, clock) }()
	defer func() { cancel(); <-done }()
	tick := func(ms int64) {
		mono.Add(ms)
		ticks <- time.Time{}
		ticks <- time.Time{} // the first is handled once the second is taken
	}
	heardSince := func() time.Time {
		s.hearing.mu.Lock()
		defer s.hearing.mu.Unlock()
		return s.hearing.since
	}
	for range 10 {
		tick(50)
	}
	if since := heardSince(); !since.IsZero() || s.stalls.Load() != 0 {
		t.Fatalf("ticks at their pace noted a stall: since %v, %d stalls", since, s.stalls.Load())
	}
	if l := s.live.RecentLateness(fake); l != 0 {
		t.Fatalf("ticks at their pace noted lateness %v", l)
	}
	tick(stallGap(s.opt.TTL).Milliseconds() + 1)
	if since := heardSince(); !since.Equal(fake) || s.stalls.Load() != 1 {
		t.Fatalf("after a stall: since %v, %d stalls; want %v, 1", since, s.stalls.Load(), fake)
	}
	if l, want := s.live.RecentLateness(fake), stallGap(s.opt.TTL)+time.Millisecond; l != want {
		t.Fatalf("after a stall: recent lateness %v, want %v", l, want)
	}
}

// TestDeltaWithoutBaseAsksForFullReport: a delta this coordinator has no
// base for (it started after the host's last full report) makes it ask
// the host for a full report on the host's notice subject, at most once
// per askFullEvery; once a full report is in, the deltas that follow it
// ask for nothing.
func TestDeltaWithoutBaseAsksForFullReport(t *testing.T) {
	ns := testutil.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	asks := make(chan wire.AssignNotice, 10)
	if _, err := nc.Subscribe(wire.AssignNoticeSubject("h1"), func(m *nats.Msg) {
		var n wire.AssignNotice
		_ = json.Unmarshal(m.Data, &n)
		asks <- n
	}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), live: liveness.New(), hbDec: heartbeat.NewDecoder(),
		kick: make(chan struct{}, 1), nc: nc, asked: map[string]time.Time{}}
	rec := func(hb wire.Heartbeat, at time.Time) {
		hb.Node, hb.Incarnation = "h1", 7
		data, _ := json.Marshal(hb)
		s.record(heard{subject: wire.HeartbeatSubject("h1"), data: data, at: at})
		_ = nc.Flush()
	}
	expect := func(n int) {
		t.Helper()
		time.Sleep(100 * time.Millisecond)
		if len(asks) != n {
			t.Fatalf("%d asks for a full report, want %d", len(asks), n)
		}
	}
	at := time.UnixMilli(1_000_000)
	cs := []wire.CopyStatus{{Stream: "s", StreamID: 1, Role: wire.RoleOwner, Epoch: 1}}
	rec(wire.Heartbeat{Beat: 5, Delta: true, Since: 4, Copies: cs}, at)
	expect(1)
	if n := <-asks; !n.FullReport || n.Version != 0 {
		t.Fatalf("ask %+v", n)
	}
	rec(wire.Heartbeat{Beat: 6, Delta: true, Since: 5, Copies: cs}, at.Add(500*time.Millisecond))
	expect(0) // within askFullEvery
	rec(wire.Heartbeat{Beat: 7, Copies: cs}, at.Add(600*time.Millisecond))
	rec(wire.Heartbeat{Beat: 8, Delta: true, Since: 7, Copies: []wire.CopyStatus{}}, at.Add(2*time.Second))
	expect(0) // the delta follows the full report
	if got := s.live.View()["h1"].Copies; len(got) != 1 {
		t.Fatalf("copies %v after the full report", got)
	}
}

// An expiry planned at now is withdrawn when the node's incarnation was
// heard after now, and only then.
func TestExpiryWithdrawnWhenHeardSincePlan(t *testing.T) {
	now := time.Unix(100, 0)
	exp := controller.Action{Kind: controller.ActExpire, Node: "h1", Incarnation: 7, Reason: controller.DetectTTL}
	for _, c := range []struct {
		what string
		a    controller.Action
		seen liveness.Seen
		want bool
	}{
		{"heard after the plan", exp, liveness.Seen{Incarnation: 7, LastSeen: now.Add(time.Millisecond)}, true},
		{"last heard before the plan", exp, liveness.Seen{Incarnation: 7, LastSeen: now.Add(-time.Second)}, false},
		{"heard at the plan's now", exp, liveness.Seen{Incarnation: 7, LastSeen: now}, false},
		{"another incarnation heard", exp, liveness.Seen{Incarnation: 8, LastSeen: now.Add(time.Second)}, false},
		{"not an expiry", controller.Action{Kind: controller.ActLeave, Node: "h1", Incarnation: 7}, liveness.Seen{Incarnation: 7, LastSeen: now.Add(time.Second)}, false},
	} {
		if got := heardSincePlan(c.seen, c.a, now); got != c.want {
			t.Errorf("%s: withdrawn %v, want %v", c.what, got, c.want)
		}
	}
}
