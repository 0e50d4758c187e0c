package watch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/attention/judge"
)

// simHost beats as a stream host does: a liveness beat every 100 ms and a
// heartbeat every 500 ms, full every 5 s and deltas between
// (heartbeat.Reporter), split into parts (heartbeat.Split).
type simHost struct {
	name   string
	beat   uint64
	rep    heartbeat.Reporter
	copies map[string]wire.CopyStatus
}

// beats returns the encoded messages the host publishes at tick (100 ms
// each) and now.
func (h *simHost) beats(t *testing.T, tick int, now time.Time) [][]byte {
	var hbs []wire.Heartbeat
	if tick%5 == 0 {
		h.beat++
		hb := wire.Heartbeat{Node: h.name, Incarnation: 7, Beat: h.beat, AtMS: now.UnixMilli(),
			Copies: slices.Collect(maps.Values(h.copies))}
		// A part holds a few copies only, so the full reports come in
		// several parts, as a host's at scale do.
		hbs = heartbeat.Split(h.rep.Report(hb, now), 9000)
		if hbs == nil {
			t.Fatal("split failed")
		}
	} else {
		hbs = []wire.Heartbeat{{Node: h.name, Incarnation: 7, AtMS: now.UnixMilli(), Copies: []wire.CopyStatus{}, Live: true}}
	}
	out := make([][]byte, 0, len(hbs))
	for _, hb := range hbs {
		data, err := json.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

type flapEvent struct {
	at    time.Duration
	event string
}

// replayMassFailover replays a host kill on a loaded machine through a
// Watcher (real heartbeat encoding: full reports in parts, deltas,
// liveness beats) and judges every second as the service does. It returns
// every entry's listed/cleared events by kind/stream/node.
//
// Four hosts hold 48 streams of 3 copies (majority_durable, W = 2); one
// follower (h4 of s001) stands behind its owner h2 at tail 1 of 2. h3 is
// SIGKILLed at 10 s and the coordinators expire it 2 s later. Twice the
// machine stalls: no beat of any host is read for 1.5 s, then all of them
// at once, as attention's log showed after the 10,000-stream kill (every
// stream listed "0 of 3 copies current", cleared a second later, again and
// again).
func replayMassFailover(t *testing.T, cfg judge.Config) map[string][]flapEvent {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	clock := t0
	w := New(nil, Options{})
	w.now = func() time.Time { return clock }

	names := []string{"h1", "h2", "h3", "h4"}
	hosts := map[string]*simHost{}
	for _, n := range names {
		hosts[n] = &simHost{name: n, rep: heartbeat.Reporter{FullEvery: 5 * time.Second}, copies: map[string]wire.CopyStatus{}}
	}
	var streams []wire.StreamInfo
	for i := range 48 {
		name := fmt.Sprintf("s%03d", i)
		owner, f1, f2 := names[i%4], names[(i+1)%4], names[(i+2)%4]
		a := wire.Assignment{Stream: name, StreamID: uint64(i + 1), Epoch: 1, Owner: owner, Followers: []string{f1, f2}, Policy: "majority_durable"}
		streams = append(streams, wire.StreamInfo{Stream: name, StreamID: a.StreamID, Assignment: a, Policy: a.Policy, Status: wire.StatusServing, Copies: 3})
		for _, n := range a.Copies() {
			role, tail := wire.RoleFollower, uint64(2)
			if n == owner {
				role = wire.RoleOwner
			}
			if name == "s001" && n == "h4" {
				tail = 1 // stands behind its owner h2 for good
			}
			hosts[n].copies[name] = wire.CopyStatus{Stream: name, StreamID: a.StreamID, Role: role, Epoch: 1, RecordTail: tail, Confirmed: 1}
		}
	}
	const (
		killAt   = 100 // ticks of 100 ms
		expireAt = 120
		end      = 400
	)
	stalled := func(tick int) bool { return (tick >= 146 && tick < 161) || (tick >= 246 && tick < 261) }

	mem := judge.NewMemory()
	listed := map[string]bool{}
	events := map[string][]flapEvent{}
	var queued [][]byte // beats sent during a stall, not read yet
	for tick := 0; tick <= end; tick++ {
		clock = t0.Add(time.Duration(tick) * 100 * time.Millisecond)
		for _, n := range names {
			if n == "h3" && tick >= killAt {
				continue
			}
			queued = append(queued, hosts[n].beats(t, tick, clock)...)
		}
		if !stalled(tick) {
			for _, data := range queued {
				var head struct {
					Node string `json:"node"`
				}
				if err := json.Unmarshal(data, &head); err != nil {
					t.Fatal(err)
				}
				w.onHeartbeat(&nats.Msg{Subject: wire.HeartbeatSubject(head.Node), Data: data})
			}
			queued = queued[:0]
		}
		if tick%10 != 5 {
			continue
		}
		nodes := make([]wire.NodeInfo, 0, len(names))
		for _, n := range names {
			st := wire.NodeLive
			if n == "h3" && tick >= expireAt {
				st = wire.NodeExpired
			}
			nodes = append(nodes, wire.NodeInfo{Node: n, State: st, Copies: 36})
		}
		w.mu.Lock()
		hbs := w.heartbeatsLocked()
		w.mu.Unlock()
		v := judge.View{Streams: streams, Nodes: nodes, Version: 1, ListeningSince: t0.Add(-time.Minute)}
		now := map[string]bool{}
		for _, e := range judge.Judge(cfg, v, hbs, mem, clock) {
			k := e.Kind + "/" + e.Stream + "/" + e.Node
			now[k] = true
			if !listed[k] {
				events[k] = append(events[k], flapEvent{clock.Sub(t0), "listed"})
			}
		}
		for k := range listed {
			if !now[k] {
				events[k] = append(events[k], flapEvent{clock.Sub(t0), "cleared"})
			}
		}
		listed = now
	}
	return events
}

// TestLateBeatsListOncePerChange: under a mass failover on a loaded
// machine an entry is listed once and cleared once per real change. The
// kill of h3 leaves every stream 2 of 3 copies (W = 2): nothing is below
// its confirm policy; the node h3 is listed once, once the coordinators
// expire it; the follower that stands behind is listed once and stays.
// Before the judge's LateGrace, every stall of 1.5 s (beats late past the
// 800 ms TTL) listed every stream and cleared it again.
func TestLateBeatsListOncePerChange(t *testing.T) {
	cfg := judge.Config{TTL: 800 * time.Millisecond, LagWindow: 10 * time.Second, LateGrace: judge.DefaultLateGrace}
	events := replayMassFailover(t, cfg)
	want := map[string]string{
		wire.AttentionNodeHolds + "//h3":       "listed",
		wire.AttentionFollowerLag + "/s001/h4": "listed",
	}
	for k, evs := range events {
		got := ""
		for _, e := range evs {
			got += " " + e.event + "@" + e.at.String()
		}
		if w, ok := want[k]; !ok || len(evs) != 1 || evs[0].event != w {
			t.Errorf("%s:%s; want %q once", k, got, want[k])
		}
	}
	for k := range want {
		if _, ok := events[k]; !ok {
			t.Errorf("%s never listed", k)
		}
	}

	// The same replay judged on the TTL alone (no grace, the judge before
	// LateGrace): every stall lists the streams and clears them again, so
	// this replay does tell the difference.
	events = replayMassFailover(t, judge.Config{TTL: cfg.TTL, LagWindow: cfg.LagWindow})
	flaps := 0
	for _, evs := range events {
		flaps += len(evs)
	}
	if flaps < 4*48 {
		t.Errorf("without a grace: %d events; the replay no longer reproduces the flapping", flaps)
	}
}
