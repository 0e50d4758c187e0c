package host

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
)

// reportsOf starts a host holding copies copies (all of existing streams,
// none assigned here) whose full reports are an hour apart, and returns
// it with a channel of its whole reports (full and deltas; not liveness
// beats) as they arrive, from after a full report.
func reportsOf(t *testing.T, copies int) (*fixture, <-chan wire.Heartbeat) {
	t.Helper()
	dir, streams := dirWithCopies(t, copies)
	f := newFixtureWith(t, fixtureOptions{dataDir: dir, streams: streams, fullReport: time.Hour})
	ch := make(chan wire.Heartbeat, 1024)
	asm := heartbeat.NewAssembler()
	sub, err := f.nc.Subscribe(wire.HeartbeatSubject("n1"), func(m *nats.Msg) {
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil || hb.Live {
			return
		}
		if whole, ok := asm.Add(hb); ok {
			select {
			case ch <- whole:
			default:
				t.Error("report channel full")
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The host's first full report may have gone before the subscription:
	// ask for another.
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.host.beatMu.Lock()
	asked := f.host.beat.Load()
	f.host.fullAsked.Store(true)
	f.host.beatMu.Unlock()
	f.host.requestBeat()
	// Then the asked-for full report, and an empty delta after it.
	nextReport(t, ch, fmt.Sprintf("full report of %d copies", copies), func(hb wire.Heartbeat) bool {
		return !hb.Delta && hb.Beat > asked && len(hb.Copies) == copies
	})
	return f, ch
}

// nextReport returns the next report for which keep is true, failing the
// test after 10 s.
func nextReport(t *testing.T, ch <-chan wire.Heartbeat, what string, keep func(wire.Heartbeat) bool) wire.Heartbeat {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case hb := <-ch:
			if keep(hb) {
				return hb
			}
		case <-deadline:
			t.Fatalf("no %s within 10s", what)
		}
	}
}

// settled returns the next empty delta.
func settled(t *testing.T, ch <-chan wire.Heartbeat) wire.Heartbeat {
	t.Helper()
	return nextReport(t, ch, "empty delta", func(hb wire.Heartbeat) bool { return hb.Delta && len(hb.Copies) == 0 })
}

// A heartbeat between full reports lists exactly the copies that changed:
// a copy with records written, and a copy deleted (gone); the untouched
// ones are not listed, and the beats after list nothing.
func TestHeartbeatDeltaListsExactlyTheChangedCopies(t *testing.T) {
	f, ch := reportsOf(t, 6)
	first := settled(t, ch)
	c := f.host.store.Get("stream-02")
	if _, err := c.Append(context.Background(), [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if err := f.host.store.Delete("stream-04"); err != nil {
		t.Fatal(err)
	}
	var listed []wire.CopyStatus
	for len(listed) < 2 {
		hb := nextReport(t, ch, "delta", func(hb wire.Heartbeat) bool { return hb.Beat > first.Beat })
		if !hb.Delta {
			t.Fatalf("beat %d is a full report; want deltas (full reports an hour apart)", hb.Beat)
		}
		listed = append(listed, hb.Copies...)
	}
	want := map[string]wire.CopyStatus{
		"stream-02": {Stream: "stream-02", StreamID: 3, Role: wire.RoleNone, RecordTail: 2},
		"stream-04": {Stream: "stream-04", StreamID: 5, Role: wire.RoleNone, Gone: true},
	}
	got := map[string]wire.CopyStatus{}
	for _, cs := range listed {
		if _, dup := got[cs.Stream]; dup {
			t.Fatalf("%s listed twice: %v", cs.Stream, listed)
		}
		got[cs.Stream] = cs
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deltas listed %v, want %v", got, want)
	}
	// Nothing changes any more: the next beats list nothing.
	last := nextReport(t, ch, "delta", func(wire.Heartbeat) bool { return true }).Beat
	for range 3 {
		hb := nextReport(t, ch, "delta", func(hb wire.Heartbeat) bool { return hb.Beat > last })
		if !hb.Delta || len(hb.Copies) != 0 {
			t.Fatalf("idle beat %d: delta %v lists %v; want an empty delta", hb.Beat, hb.Delta, hb.Copies)
		}
		last = hb.Beat
	}
}

// A change the marks missed is not in any delta, and the next full report
// lists it: the full report is the deltas' safety net.
func TestHeartbeatFullReportRecoversAMissedChange(t *testing.T) {
	f, ch := reportsOf(t, 3)
	first := settled(t, ch)
	// Written with the beats held, its marks dropped: no beat hears of it.
	f.host.beatMu.Lock()
	_, err := f.host.store.Get("stream-01").Append(context.Background(), [][]byte{[]byte("a")})
	f.host.changed.take()
	f.host.beatMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	last := first.Beat
	for range 3 {
		hb := nextReport(t, ch, "delta", func(hb wire.Heartbeat) bool { return hb.Beat > last })
		if !hb.Delta || len(hb.Copies) != 0 {
			t.Fatalf("beat %d after a missed change: delta %v lists %v; want an empty delta", hb.Beat, hb.Delta, hb.Copies)
		}
		last = hb.Beat
	}
	f.host.fullAsked.Store(true)
	f.host.requestBeat()
	full := nextReport(t, ch, "full report", func(hb wire.Heartbeat) bool { return hb.Beat > last && !hb.Delta })
	for _, cs := range full.Copies {
		if cs.Stream == "stream-01" && cs.RecordTail != 1 {
			t.Fatalf("full report lists %+v; want record tail 1", cs)
		}
	}
	if len(full.Copies) != 3 {
		t.Fatalf("full report lists %d copies, want 3", len(full.Copies))
	}
}

// The retention loop visits only the copies with a role and a retention
// that bounds something: of two owned streams, the bounded one; none once
// its retention is lifted.
func TestRetentionVisitsOnlyBoundedCopies(t *testing.T) {
	c := newMiniCluster(t)
	bounded := assignment("bounded", 1, 1, "n1", nil)
	bounded.Retention = wire.Retention{MaxRecords: 5}
	free := assignment("free", 2, 1, "n1", nil)
	c.assign(bounded, free)
	n1 := c.start("n1", nil)
	c.waitCopy("n1", "bounded", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	c.waitCopy("n1", "free", "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	names := func() []string {
		var out []string
		for _, r := range n1.h.retained.list() {
			out = append(out, r.stream)
		}
		return out
	}
	if got := names(); fmt.Sprint(got) != "[bounded]" {
		t.Fatalf("retention visits %v, want [bounded]", got)
	}
	n1.h.lookupReplica("bounded").mu.Lock()
	n1.h.lookupReplica("bounded").publishStatus(wire.Retention{})
	n1.h.lookupReplica("bounded").mu.Unlock()
	if got := names(); len(got) != 0 {
		t.Fatalf("retention visits %v after the bound was lifted, want none", got)
	}
}

// A create's notice carries the new stream's assignment, and the host
// applies it without a pull: here the coordinators' snapshot never holds
// the stream, so only the notice can make the host its owner. A notice of
// a version already applied is not applied.
func TestCreateNoticeAppliedWithoutPull(t *testing.T) {
	f := newFixture(t)
	deadline := time.Now().Add(10 * time.Second)
	for !f.host.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("host not ready within 10s")
		}
		time.Sleep(10 * time.Millisecond) // waiting for the first pull, not an assertion
	}
	notice := func(version uint64, as wire.AssignedStream) {
		t.Helper()
		data, _ := json.Marshal(wire.AssignNotice{Version: version, Assigned: &as})
		if err := f.nc.Publish(wire.AssignNoticeSubject("n1"), data); err != nil {
			t.Fatal(err)
		}
	}
	notice(5, assignment("fresh", 7, 1, "n1", nil))
	f.waitHB("owner of fresh", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, "fresh")
		return ok && cs.Role == wire.RoleOwner && cs.Epoch == 1
	})
	if n := f.host.lookupReplica("fresh").noticed; n != 5 {
		t.Fatalf("noticed %d, want 5", n)
	}

	f.set(9, map[string]uint64{"fresh": 7}, assignment("fresh", 7, 1, "n1", nil))
	for f.host.appliedVersion() < 9 {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("version 9 not applied")
		}
		time.Sleep(10 * time.Millisecond) // waiting for the pull, not an assertion
	}
	notice(9, assignment("late", 8, 1, "n1", nil))
	f.set(10, map[string]uint64{"fresh": 7}, assignment("fresh", 7, 1, "n1", nil))
	f.waitHB("version 10 applied", func(wire.Heartbeat) bool { return f.host.appliedVersion() >= 10 })
	if f.host.store.Get("late") != nil {
		t.Fatal("a create notice of a version already applied made a copy")
	}
}

// appliedVersion is the version applied (for tests).
func (h *Host) appliedVersion() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied
}
