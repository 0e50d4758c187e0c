package brookload

import (
	"bytes"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestRecordEncoding(t *testing.T) {
	id := ID{Pub: 0x01020304, Seq: 0x05060708090a0b0c}
	b := Encode(id, 20)
	if len(b) != 20 {
		t.Fatalf("len %d, want 20", len(b))
	}
	// The layout tools/bench writes too: publisher then sequence, big endian.
	if want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !bytes.Equal(b[:IDLen], want) {
		t.Errorf("header % x, want % x", b[:IDLen], want)
	}
	if got, ok := Decode(b); !ok || got != id {
		t.Errorf("Decode = %+v, %v; want %+v", got, ok, id)
	}
	if short := Encode(id, 3); len(short) != IDLen {
		t.Errorf("a record shorter than its id: len %d, want %d", len(short), IDLen)
	}
	if _, ok := Decode(b[:IDLen-1]); ok {
		t.Error("a record too short to name an id decoded")
	}
	if bytes.Equal(Encode(ID{Pub: 1}, 16), Encode(ID{Pub: 2}, 16)) {
		t.Error("different ids encode alike")
	}
}

func TestComposeService(t *testing.T) {
	for node, want := range map[string]string{"h1": "host1", "h4": "host4", "h12": "host12"} {
		if got, err := ComposeService(node); err != nil || got != want {
			t.Errorf("ComposeService(%q) = %q, %v; want %q", node, got, err, want)
		}
	}
	for _, bad := range []string{"", "h", "x1", "h1a", "host1"} {
		if _, err := ComposeService(bad); err == nil {
			t.Errorf("ComposeService(%q) accepted", bad)
		}
	}
}

func info(owner string, followers []string, epoch uint64, status string) wire.StreamInfo {
	return wire.StreamInfo{Stream: "s", Status: status,
		Assignment: wire.Assignment{Stream: "s", Owner: owner, Followers: followers, Epoch: epoch}}
}

func TestFailedOver(t *testing.T) {
	for _, c := range []struct {
		name string
		i    wire.StreamInfo
		want bool
	}{
		{"new owner serving", info("h2", []string{"h3"}, 2, wire.StatusServing), true},
		{"still the victim", info("h1", []string{"h2", "h3"}, 1, wire.StatusServing), false},
		{"recovering", info("h1", []string{"h2", "h3"}, 1, wire.StatusRecovering), false},
		{"waiting", info("h2", []string{"h3"}, 2, wire.StatusWaiting), false},
	} {
		if got := FailedOver(c.i, "h1", 1); got != c.want {
			t.Errorf("%s: FailedOver = %v, want %v", c.name, got, c.want)
		}
	}
	pending := info("h2", []string{"h3"}, 2, wire.StatusServing)
	pending.Recovery = &wire.PendingRecovery{Stream: "s"}
	if FailedOver(pending, "h1", 1) {
		t.Error("a pending recovery counted as done")
	}
}

func TestFollowing(t *testing.T) {
	i := info("h2", []string{"h3", "h1"}, 2, wire.StatusServing)
	i.CopyTails = []wire.CopyTails{{Node: "h1", Role: wire.RoleNone, Epoch: 1, Published: true}}
	if Following(i, "h1") {
		t.Error("assigned but still reporting no role: not following yet")
	}
	i.CopyTails[0] = wire.CopyTails{Node: "h1", Role: wire.RoleFollower, Epoch: 2, Published: true}
	if !Following(i, "h1") {
		t.Error("assigned and reporting follower at the epoch: following")
	}
	i.Assignment.Followers = []string{"h3"}
	if Following(i, "h1") {
		t.Error("not in the assignment: not following")
	}
}

func TestRejoinWithoutRecovery(t *testing.T) {
	ok := Rejoin{Node: "h1", Follower: true, EpochBefore: 2, Epoch: 2, StartsBefore: 1, StartsAfter: 1, TraceBefore: "t", TraceAfter: "t"}
	if !ok.WithoutRecovery() {
		t.Fatal("a clean rejoin judged bad")
	}
	for name, mod := range map[string]func(*Rejoin){
		"not follower":   func(r *Rejoin) { r.Follower = false },
		"epoch moved":    func(r *Rejoin) { r.Epoch = 3 },
		"start appended": func(r *Rejoin) { r.StartsAfter = 2 },
		"new trace":      func(r *Rejoin) { r.TraceAfter = "u" },
		"recovery seen":  func(r *Rejoin) { r.RecoverySeen = true },
	} {
		r := ok
		mod(&r)
		if r.WithoutRecovery() {
			t.Errorf("%s: judged a rejoin without recovery", name)
		}
	}
}
