package host

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
)

// BenchmarkHostFailover measures what one surviving host does in a mass
// failover, per copy, on a real Pebble store and a real nats-server: the
// host holds n copies, all following an owner that is gone (as a
// surviving host holds the copies of a killed host's streams); each
// iteration seals every copy at the next fence in batches of
// wire.MaxSealBatch sent all at once (the coordinator leader's seal
// batches; each seal's fence is durable before its answer), then assigns
// the next epoch in one notice and one pull, which promotes owned of the
// copies and has the others follow another owner (each a history cut and
// a seal release first). It reports the seals' and the apply's time per
// copy, and the slowest seal batch. The host logs at info into io.Discard
// (the lines are formatted, not written).
func BenchmarkHostFailover(b *testing.B) {
	const n, owned = 2000, 800
	c := newMiniCluster(b)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%04d", i)
	}
	epoch := uint64(1)
	as := make([]wire.AssignedStream, n)
	for i, name := range names {
		as[i] = assignment(name, uint64(100+i), epoch, "gone", []string{"n1"})
	}
	c.table.Set(as...)
	th := c.start("n1", func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	waitRoles(b, th.h, names, epoch, func(int) string { return wire.RoleFollower })

	var sealTime, applyTime, slowest time.Duration
	b.ResetTimer()
	for it := range b.N {
		fence := epoch + 1
		start := time.Now()
		batches := sealAll(b, c, names, fence)
		sealTime += time.Since(start)
		slowest = max(slowest, batches)

		// Each iteration promotes another owned copies and has the rest
		// follow another host.
		role := func(i int) string {
			if (i+it*owned)%n < owned {
				return wire.RoleOwner
			}
			return wire.RoleFollower
		}
		for i, name := range names {
			starts := []wire.HistoryStart{{Epoch: 1, Node: "gone"}, {Epoch: fence, Node: "n1"}}
			if role(i) == wire.RoleOwner {
				as[i] = assignment(name, uint64(100+i), fence, "n1", []string{"n2"}, starts...)
			} else {
				as[i] = assignment(name, uint64(100+i), fence, "n2", []string{"n1"}, starts...)
			}
		}
		start = time.Now()
		c.assign(as...)
		waitRoles(b, th.h, names, fence, role)
		applyTime += time.Since(start)
		epoch = fence
	}
	b.StopTimer()
	b.ReportMetric(float64(sealTime.Microseconds())/float64(b.N*n), "seal-µs/copy")
	b.ReportMetric(float64(applyTime.Microseconds())/float64(b.N*n), "apply-µs/copy")
	b.ReportMetric(float64(slowest.Milliseconds()), "slowest-batch-ms")
}

// sealAll seals every named copy on n1 at fence, in batches of
// wire.MaxSealBatch sent at once, fails on any seal not answered sealed,
// and returns the slowest batch's round trip.
func sealAll(b *testing.B, c *miniCluster, names []string, fence uint64) time.Duration {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	for lo := 0; lo < len(names); lo += wire.MaxSealBatch {
		batch := wire.SealBatch{TimeoutMs: 10_000}
		for i := lo; i < min(lo+wire.MaxSealBatch, len(names)); i++ {
			batch.Seals = append(batch.Seals, wire.SealRequest{Stream: names[i], StreamID: uint64(100 + i), FenceEpoch: fence, Transition: fence})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			resp, err := c.nc.Request(wire.SealBatchSubject("n1"), mustJSON(b, batch), 30*time.Second)
			took := time.Since(start)
			if err != nil {
				b.Error(err)
				return
			}
			var r wire.SealBatchReply
			if err := json.Unmarshal(resp.Data, &r); err != nil || len(r.Replies) != len(batch.Seals) {
				b.Errorf("seal batch reply %.200s: %v", resp.Data, err)
				return
			}
			for _, res := range r.Replies {
				if res.Error != nil || res.Reply == nil {
					b.Errorf("seal: %v", res.Error)
				}
			}
			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return slowest
}

// waitRoles waits until every named copy on h plays role(i) at epoch.
func waitRoles(b *testing.B, h *Host, names []string, epoch uint64, role func(int) string) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < len(names); {
		s := h.replica(names[i]).status.Load()
		if s != nil && s.role == role(i) && s.epoch == epoch {
			i++
			continue
		}
		if time.Now().After(deadline) {
			b.Fatalf("copy %s: %+v after 60s, want %s at epoch %d", names[i], s, role(i), epoch)
		}
		time.Sleep(time.Millisecond)
	}
}
