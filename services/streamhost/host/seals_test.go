package host

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/brook-streams/brook/pkg/streamlog"
	"github.com/brook-streams/brook/pkg/wire"
)

// sealBatch sends a batch of seals to node and returns the reply, or the
// batch's error.
func (c *miniCluster) sealBatch(node string, body []byte) (*wire.SealBatchReply, *wire.Error) {
	c.t.Helper()
	resp, err := c.nc.Request(wire.SealBatchSubject(node), body, 5*time.Second)
	if err != nil {
		c.t.Fatalf("seal batch: %v", err)
	}
	if e := replyError(resp); e != nil {
		return nil, e
	}
	var r wire.SealBatchReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		c.t.Fatalf("decode seal batch reply %s: %v", resp.Data, err)
	}
	return &r, nil
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startOwning starts node as the owner, at epoch 1, of the streams
// prepared on it (ids 10, 11, ... in order) and waits until it reports
// them owned (its subscriptions are up by then).
func startOwning(c *miniCluster, node string, adjust func(*Config), streams ...string) *testHost {
	c.t.Helper()
	for i, s := range streams {
		c.table.Set(assignment(s, uint64(10+i), 1, node, []string{}))
	}
	th := c.start(node, adjust)
	for _, s := range streams {
		c.waitCopy(node, s, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	}
	return th
}

// TestSealBatchAnswersEachAndFencesDurably: a batch's seals are answered
// one by one in order (valid ones sealed, an unknown stream, a wrong id
// and a stale fence each with its own error), and every fence reported is
// durable when the reply arrives: the host's store is on a crashable
// in-memory file system, and a crash clone of it taken right after the
// reply (only what was synced) holds each seal.
func TestSealBatchAnswersEachAndFencesDurably(t *testing.T) {
	c := newMiniCluster(t)
	mem := vfs.NewCrashableMem()
	syncedDir(t, mem, c.dataDir("n1"))
	for i := range 3 {
		c.table.Set(assignment(fmt.Sprintf("s%d", i), uint64(10+i), 1, "n1", []string{}))
	}
	c.start("n1", func(cfg *Config) { cfg.StoreFS = mem })
	for i := range 3 {
		c.waitCopy("n1", fmt.Sprintf("s%d", i), "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	}
	if pc := c.mustPublish("s0", payload(0)); pc.Offset != 0 {
		t.Fatalf("publish: %+v", pc)
	}
	if pc := c.mustPublish("s0", payload(1)); pc.Offset != 1 {
		t.Fatalf("publish: %+v", pc)
	}
	body := mustJSON(t, wire.SealBatch{Seals: []wire.SealRequest{
		{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1},
		{Stream: "nope", StreamID: 1, FenceEpoch: 2, Transition: 1},
		{Stream: "s1", StreamID: 11, FenceEpoch: 3, Transition: 4},
		{Stream: "s2", StreamID: 99, FenceEpoch: 2, Transition: 1},
		{Stream: "s2", StreamID: 12, FenceEpoch: 1, Transition: 1},
	}})
	r, e := c.sealBatch("n1", body)
	if e != nil {
		t.Fatalf("seal batch: %v", e)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if len(r.Replies) != 5 {
		t.Fatalf("%d replies, want 5: %+v", len(r.Replies), r.Replies)
	}
	for i, want := range []string{"", wire.CodeNotFound, "", wire.CodeNotFound, wire.CodeStaleEpoch} {
		got := r.Replies[i]
		if (got.Reply == nil) == (got.Error == nil) {
			t.Fatalf("reply %d: want exactly one of reply and error: %+v", i, got)
		}
		if want == "" && got.Error != nil || want != "" && (got.Error == nil || got.Error.Code != want) {
			t.Errorf("reply %d: %+v %v, want code %q", i, got.Reply, got.Error, want)
		}
	}
	if s := r.Replies[0].Reply; s.Stream != "s0" || s.FenceEpoch != 2 || s.RecordTail != 2 || s.Node != "n1" {
		t.Errorf("seal of s0: %+v", s)
	}
	if s := r.Replies[2].Reply; s.Stream != "s1" || s.FenceEpoch != 3 || s.Transition != 4 {
		t.Errorf("seal of s1: %+v", s)
	}

	st, err := streamlog.Open(streamlog.Options{Dir: c.dataDir("n1"), FS: crashed, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for stream, fence := range map[string]uint64{"s0": 2, "s1": 3} {
		seal, ok := st.Get(stream).SealInfo()
		if !ok || seal.FenceEpoch != fence {
			t.Errorf("%s on disk at the reply: sealed %v %+v, want fence %d", stream, ok, seal, fence)
		}
	}
	if _, ok := st.Get("s2").SealInfo(); ok {
		t.Error("s2 sealed on disk, but both its seals were refused")
	}
}

// TestSealBatchRefusals: a malformed, empty or oversized batch is refused
// as a whole with bad_request; seals beyond the seals' budget are each
// answered overloaded while the others are sealed.
func TestSealBatchRefusals(t *testing.T) {
	c := newMiniCluster(t)
	for i := range 3 {
		c.prepareCopy("n1", fmt.Sprintf("s%d", i), uint64(10+i), 1, nil)
	}
	th := startOwning(c, "n1", func(cfg *Config) { cfg.MaxInflight = 2 }, "s0", "s1", "s2")
	seal := wire.SealRequest{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1}
	many := make([]wire.SealRequest, wire.MaxSealBatch+1)
	for i := range many {
		many[i] = seal
	}
	for name, body := range map[string][]byte{
		"not json":      []byte("{"),
		"unknown field": []byte(`{"seals":[{"stream":"s0","stream_id":10,"fence_epoch":2,"transition":1,"force":true}]}`),
		"empty":         []byte(`{"seals":[]}`),
		"no seals":      []byte(`{}`),
		"too many":      mustJSON(t, wire.SealBatch{Seals: many}),
		"trailing":      []byte(`{"seals":[]} {}`),
	} {
		if r, e := c.sealBatch("n1", body); e == nil || e.Code != wire.CodeBadRequest {
			t.Errorf("%s: %+v %v, want bad_request", name, r, e)
		}
	}
	body := mustJSON(t, wire.SealBatch{Seals: []wire.SealRequest{
		seal,
		{Stream: "s1", StreamID: 11, FenceEpoch: 2, Transition: 1},
		{Stream: "s2", StreamID: 12, FenceEpoch: 2, Transition: 1},
	}})
	r, e := c.sealBatch("n1", body)
	if e != nil || len(r.Replies) != 3 {
		t.Fatalf("batch of 3 with a budget of 2: %+v %v", r, e)
	}
	if r.Replies[0].Reply == nil || r.Replies[1].Reply == nil {
		t.Errorf("the first two seals: %+v, want sealed", r.Replies[:2])
	}
	if r.Replies[2].Error == nil || r.Replies[2].Error.Code != wire.CodeOverloaded {
		t.Errorf("the third seal: %+v, want overloaded", r.Replies[2])
	}
	waitInUse(t, th.h.sealReqs, 0)
}

// TestSealBatchTimeoutAnswersTheRest: a seal that cannot finish (its
// replica's lock held, as by a role that is slow to stop) does not hold
// its batch-mates' answers: with timeout_ms the host answers the others
// sealed and the stuck one timeout once the timeout has passed, well
// before the stuck seal ends; the stuck seal then completes (its fence
// on disk) and gives its budget slot back.
func TestSealBatchTimeoutAnswersTheRest(t *testing.T) {
	c := newMiniCluster(t)
	for i := range 3 {
		c.prepareCopy("n1", fmt.Sprintf("s%d", i), uint64(10+i), 1, nil)
	}
	th := startOwning(c, "n1", nil, "s0", "s1", "s2")
	r1 := th.h.replica("s1")
	r1.mu.Lock()
	held := true
	defer func() {
		if held {
			r1.mu.Unlock()
		}
	}()
	body := mustJSON(t, wire.SealBatch{TimeoutMs: 300, Seals: []wire.SealRequest{
		{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1},
		{Stream: "s1", StreamID: 11, FenceEpoch: 2, Transition: 1},
		{Stream: "s2", StreamID: 12, FenceEpoch: 2, Transition: 1},
	}})
	// The request's own timeout (5 s) is far past timeout_ms: without the
	// host's timeout the request fails (the lock is held until it has).
	resp, err := c.nc.Request(wire.SealBatchSubject("n1"), body, 5*time.Second)
	if err != nil {
		t.Fatalf("seal batch with a stuck seal: %v (the host waited for it)", err)
	}
	var r wire.SealBatchReply
	if err := json.Unmarshal(resp.Data, &r); err != nil || len(r.Replies) != 3 {
		t.Fatalf("reply %s: %v", resp.Data, err)
	}
	if r.Replies[0].Reply == nil || r.Replies[2].Reply == nil {
		t.Errorf("the free seals: %+v %+v, want sealed", r.Replies[0], r.Replies[2])
	}
	if e := r.Replies[1].Error; e == nil || e.Code != wire.CodeTimeout {
		t.Errorf("the stuck seal: %+v, want timeout", r.Replies[1])
	}
	r1.mu.Unlock()
	held = false
	waitInUse(t, th.h.sealReqs, 0)
	if seal, ok := th.h.store.Get("s1").SealInfo(); !ok || seal.FenceEpoch != 2 {
		t.Errorf("s1 after its seal went on: sealed %v %+v, want fence 2", ok, seal)
	}
}

// TestFitSealBatchReply: a batch reply past the limit has seals from the
// end answered overloaded until it fits; one within it is left alone.
func TestFitSealBatchReply(t *testing.T) {
	results := make([]wire.SealResult, 8)
	for i := range results {
		results[i].Reply = &wire.SealReply{Node: "n1", Stream: fmt.Sprintf("s%d", i), Digest: strings.Repeat("ab", 100),
			LogEpochs: []wire.LogEpoch{{Epoch: 1}}}
	}
	whole := len(mustJSON(t, wire.SealBatchReply{Replies: results}))
	if cut := fitSealBatchReply(results, 0); cut != 0 {
		t.Fatalf("a limit not known: %d cut", cut)
	}
	if cut := fitSealBatchReply(results, int64(whole)); cut != 0 {
		t.Fatalf("a reply of %d bytes within %d: %d cut", whole, whole, cut)
	}
	limit := int64(whole / 2)
	cut := fitSealBatchReply(results, limit)
	if n := len(mustJSON(t, wire.SealBatchReply{Replies: results})); cut == 0 || int64(n) > limit {
		t.Fatalf("cut %d, reply %d bytes, limit %d", cut, n, limit)
	}
	for i, r := range results {
		kept := i < len(results)-cut
		if kept != (r.Reply != nil) || !kept && (r.Error == nil || r.Error.Code != wire.CodeOverloaded) {
			t.Errorf("result %d: %+v %v (cut %d)", i, r.Reply, r.Error, cut)
		}
	}
}

// TestSealBatchRefusalsLoggedOnceASecond: seals a batch could not admit
// are counted in the seals' budget and logged like any cap's refusals, at
// most one line a second however many batches were partly refused.
func TestSealBatchRefusalsLoggedOnceASecond(t *testing.T) {
	c := newMiniCluster(t)
	c.prepareCopy("n1", "s0", 10, 1, nil)
	th := startOwning(c, "n1", nil, "s0")
	th.h.sealReqs.setLimit(0)
	body := mustJSON(t, wire.SealBatch{Seals: []wire.SealRequest{
		{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1},
		{Stream: "s0", StreamID: 10, FenceEpoch: 2, Transition: 1},
	}})
	for range 5 {
		r, e := c.sealBatch("n1", body)
		if e != nil || len(r.Replies) != 2 || r.Replies[0].Error == nil || r.Replies[0].Error.Code != wire.CodeOverloaded {
			t.Fatalf("batch with no budget: %+v %v", r, e)
		}
	}
	if n := strings.Count(th.log.String(), "overloaded"); n != 1 {
		t.Errorf("%d log lines about refused seals for 5 batches within a second, want 1:\n%s", n, th.log.String())
	}
	if n := th.h.sealReqs.refused.Load(); n != 8 {
		t.Errorf("refusals since the log line: %d, want 8 (the 4 batches after it, 2 each)", n)
	}
}

// FuzzDecodeSealBatch: the batch decoder never panics, and what it accepts
// holds 1 to MaxSealBatch seals and encodes back to a batch it accepts
// equally.
func FuzzDecodeSealBatch(f *testing.F) {
	f.Add([]byte(`{"seals":[{"stream":"s0","stream_id":10,"fence_epoch":2,"transition":1}]}`))
	f.Add([]byte(`{"seals":[{"stream":"s0","stream_id":10,"fence_epoch":2,"transition":1,"traceparent":"00-x"},{"stream":"s1"}]}`))
	f.Add([]byte(`{"seals":[]}`))
	f.Add([]byte(`{"seals":[{"stream":"s0","stream_id":10,"fence_epoch":2,"transition":1}],"timeout_ms":900}`))
	f.Add([]byte(`{"seals":null}`))
	f.Add([]byte(`{"seals":[{"stream":1}]}`))
	f.Add([]byte(`{"seals":[` + strings.Repeat(`{},`, 1100) + `{}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, e := decodeSealBatch(data)
		reqs := b.Seals
		if e != nil {
			if e.Code != wire.CodeBadRequest {
				t.Fatalf("refusal %v, want bad_request", e)
			}
			return
		}
		if len(reqs) == 0 || len(reqs) > wire.MaxSealBatch {
			t.Fatalf("accepted %d seals", len(reqs))
		}
		back, e := decodeSealBatch(mustJSON(t, b))
		again := back.Seals
		if e != nil || len(again) != len(reqs) || back.TimeoutMs != b.TimeoutMs {
			t.Fatalf("re-encoded batch: %d seals, timeout %d, %v; want %d, %d", len(again), back.TimeoutMs, e, len(reqs), b.TimeoutMs)
		}
		for i := range reqs {
			if again[i] != reqs[i] {
				t.Fatalf("seal %d: %+v after a round trip, was %+v", i, again[i], reqs[i])
			}
		}
	})
}

// BenchmarkSealBatch seals 256 copies of one store one after another, a
// few at a time, and all at once (as onSeals runs a batch): the synced
// fence writes of concurrent seals share fsyncs in Pebble's commit
// pipeline.
func BenchmarkSealBatch(b *testing.B) {
	const n = 256
	for _, par := range []int{1, 8, 64, 256} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			st, err := streamlog.Open(streamlog.Options{Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = st.Close() }()
			cs := make([]*streamlog.Copy, n)
			for i := range cs {
				if cs[i], err = st.Create(fmt.Sprintf("s%d", i), uint64(i+1), wire.Retention{}); err != nil {
					b.Fatal(err)
				}
				if err := cs[i].BeginEpoch(1); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for it := range b.N {
				sem := make(chan struct{}, par)
				var wg sync.WaitGroup
				for _, c := range cs {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						// A newer transition at the same fence: a synced write each time.
						if _, err := c.Seal(2, uint64(it+1)); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/seal")
		})
	}
}
