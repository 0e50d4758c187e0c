package host

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// dirWithCopies returns a data dir whose store holds copies copies,
// stream-00 with id 1 and on, and the streams (name to id).
func dirWithCopies(t *testing.T, copies int) (string, map[string]uint64) {
	t.Helper()
	dir := t.TempDir()
	st, err := streamlog.Open(streamlog.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]uint64{}
	for i := range copies {
		name := fmt.Sprintf("stream-%02d", i)
		streams[name] = uint64(i + 1)
		if _, err := st.Create(name, uint64(i+1), wire.Retention{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, streams
}

// TestHeartbeatSplitsUnderThePayloadLimit runs a host holding more copies
// than one message of the server's payload limit can list (a 4 KiB limit
// here; the default 1 MiB is passed at a few thousand copies): every
// message must stay within the limit, and the parts of a beat must
// assemble into all of the host's copies.
func TestHeartbeatSplitsUnderThePayloadLimit(t *testing.T) {
	const copies, limit = 60, 4096
	dir, streams := dirWithCopies(t, copies)

	// Every report full: this test is about full reports' size.
	f := newFixtureWith(t, fixtureOptions{maxPayload: limit, dataDir: dir, streams: streams, fullReport: time.Nanosecond})
	var mu sync.Mutex
	asm := heartbeat.NewAssembler()
	var whole []wire.Heartbeat
	var oversize []int
	maxParts := 0
	sub, err := f.nc.Subscribe(wire.HeartbeatSubject("n1"), func(m *nats.Msg) {
		var hb wire.Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(m.Data) > limit {
			oversize = append(oversize, len(m.Data))
		}
		maxParts = max(maxParts, hb.Parts)
		if w, ok := asm.Add(hb); ok {
			whole = append(whole, w)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sub.Unsubscribe(); err != nil {
			t.Errorf("unsubscribe: %v", err)
		}
	}()

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(whole)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d whole beats assembled in 10s", n)
		}
		time.Sleep(20 * time.Millisecond) // waiting for beats, not an assertion
	}
	mu.Lock()
	defer mu.Unlock()
	if len(oversize) > 0 {
		t.Fatalf("messages over the %d-byte limit: %v", limit, oversize)
	}
	if maxParts < 2 {
		t.Fatalf("beats came in %d part(s); %d copies cannot fit %d bytes", maxParts, copies, limit)
	}
	for _, w := range whole {
		if len(w.Copies) != copies {
			t.Fatalf("beat %d assembled %d copies, want %d", w.Beat, len(w.Copies), copies)
		}
		seen := map[string]bool{}
		for _, c := range w.Copies {
			seen[c.Stream] = true
		}
		if len(seen) != copies {
			t.Fatalf("beat %d lists %d distinct copies, want %d", w.Beat, len(seen), copies)
		}
	}
	if whole[0].Beat >= whole[len(whole)-1].Beat {
		t.Fatalf("beat numbers do not rise: %d then %d", whole[0].Beat, whole[len(whole)-1].Beat)
	}
}
