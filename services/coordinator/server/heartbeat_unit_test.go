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
