package watch

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/heartbeat"
	"github.com/brook-streams/brook/pkg/wire"
)

// The watcher lists a node's copies when a judging asks for them, from a
// sorted list its reports keep across deltas, instead of rebuilding it on
// every beat. Over random sequences of reports (full, deltas with and
// without changes, lost ones, liveness beats, restarts), asked after some
// beats and not others, the copies it gives must be those a full rebuild
// from the reports gives: the list of a fresh heartbeat.Copies fed the
// same beats, as the watcher computed it on every beat before.
func TestIncrementalCopiesMatchFullRebuild(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			w := New(nil, Options{})
			ref := &heartbeat.Copies{}
			var refList []wire.CopyStatus
			refInc := uint64(0)
			rep := heartbeat.Reporter{FullEvery: time.Hour}
			held := map[string]wire.CopyStatus{}
			inc, beat := uint64(1), uint64(0)
			now := time.Unix(1000, 0)
			for step := range 200 {
				now = now.Add(500 * time.Millisecond)
				switch r := rng.IntN(20); {
				case r == 0: // a restart: a new incarnation, a new reporter
					inc++
					rep = heartbeat.Reporter{FullEvery: time.Hour}
				case r == 1:
					rep.AskFull()
				case r < 6: // something changed
					name := fmt.Sprintf("s%d", rng.IntN(8))
					if _, ok := held[name]; ok && rng.IntN(3) == 0 {
						delete(held, name)
					} else {
						held[name] = wire.CopyStatus{Stream: name, StreamID: 1, Role: wire.RoleFollower, Epoch: 1, RecordTail: uint64(rng.IntN(5))}
					}
				}
				beat++
				list := make([]wire.CopyStatus, 0, len(held))
				for _, cs := range held {
					list = append(list, cs)
				}
				hb := wire.Heartbeat{Node: "h1", Incarnation: inc, Beat: beat, Copies: list}
				if rng.IntN(10) == 0 {
					hb = wire.Heartbeat{Node: "h1", Incarnation: inc, Beat: beat, Live: true}
				} else {
					hb = rep.Report(hb, now)
				}
				if rng.IntN(8) == 0 {
					continue // lost
				}
				data, err := json.Marshal(hb)
				if err != nil {
					t.Fatal(err)
				}
				w.onHeartbeat(&nats.Msg{Subject: wire.HeartbeatSubject("h1"), Data: data})

				// The full rebuild, as before: the list of every copy
				// after each report applied; nothing known yet for a
				// new incarnation until its first report.
				if ref.Apply(hb) {
					refList, refInc = sortedByStream(ref.Map()), inc
				} else if refInc != inc {
					refList, refInc = []wire.CopyStatus{}, inc
				}
				if rng.IntN(3) != 0 {
					continue // not asked after this beat: its changes wait for the next list
				}
				w.mu.Lock()
				got := w.heartbeatsLocked()["h1"].Heartbeat.Copies
				w.mu.Unlock()
				if !reflect.DeepEqual(got, refList) {
					t.Fatalf("step %d (beat %d, delta %v, live %v): watcher holds %v, a full rebuild gives %v",
						step, beat, hb.Delta, hb.Live, got, refList)
				}
			}
		})
	}
}

// sortedByStream lists m's copies sorted by stream name, on its own (not
// by heartbeat.Copies.List).
func sortedByStream(m map[string]wire.CopyStatus) []wire.CopyStatus {
	out := []wire.CopyStatus{}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[name])
	}
	return out
}
