package raftstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/brook-streams/brook/pkg/wire"
	"github.com/brook-streams/brook/services/coordinator/state"
)

var benchHosts = []string{"h1", "h2", "h3", "h4"}

// populate registers four hosts and creates n streams of three copies
// through the leader, 32 proposals at a time.
func populate(b *testing.B, c *cluster, n int) *Store {
	b.Helper()
	s := c.stores[c.leader()]
	for _, h := range benchHosts {
		propose(b, s, state.NodeSeen(h, 1, 1000))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if r := propose(b, s, benchCreateCmd(fmt.Sprintf("s%05d", i), i)); r.Err() != nil {
				b.Error(r.Err())
			}
		}()
	}
	wg.Wait()
	return s
}

func benchCreateCmd(name string, i int) state.Command {
	a := wire.Assignment{Owner: benchHosts[i%4], Followers: []string{benchHosts[(i+1)%4], benchHosts[(i+2)%4]}, Policy: "majority_durable"}
	return state.StreamCreate(name, 3, "", wire.Retention{}, a, 1000)
}

// BenchmarkCreate10k measures one stream.create's Raft work on a
// three-replica shard holding 10,000 streams: the admin handler's read of
// what placement needs, the create's proposal, and a delete's proposal
// that keeps the shard at 10,000. read=all reads a deep copy of the whole
// state, as stream.create did before issue 17; read=view the placement
// view it reads now.
func BenchmarkCreate10k(b *testing.B) {
	c := newCluster(b)
	s := populate(b, c, 10000)
	ctx := context.Background()
	for _, read := range []state.Query{state.QueryAll{}, state.QueryPlacement{Stream: "new"}} {
		name := "read=all"
		if _, ok := read.(state.QueryPlacement); ok {
			name = "read=view"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Read(ctx, read); err != nil {
					b.Fatal(err)
				}
				if r := propose(b, s, benchCreateCmd("new", 0)); r.Err() != nil {
					b.Fatal(r.Err())
				}
				if r := propose(b, s, state.StreamDelete("new", 1000)); r.Err() != nil {
					b.Fatal(r.Err())
				}
			}
		})
	}
}

// BenchmarkRestart10k measures a Raft snapshot of 10,000 streams on every
// replica and a restart of all three coordinators' replicas from it: the
// time from opening them until a linearizable read answers with every
// stream (snapshot_ms and restart_ms per run).
func BenchmarkRestart10k(b *testing.B) {
	c := newCluster(b)
	populate(b, c, 10000)
	var snapTotal, restartTotal time.Duration
	for b.Loop() {
		began := time.Now()
		for id, s := range c.stores {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := s.Snapshot(ctx); err != nil {
				b.Fatalf("snapshot on %d: %v", id, err)
			}
			cancel()
		}
		snapTotal += time.Since(began)
		for id := range c.stores {
			c.close(id)
		}
		began = time.Now()
		for id := range c.peers {
			c.open(id)
		}
		st := read(b, c.stores[c.leader()])
		restartTotal += time.Since(began)
		if len(st.Streams) != 10000 {
			b.Fatalf("%d streams after the restart", len(st.Streams))
		}
	}
	runs := float64(b.N)
	b.ReportMetric(float64(snapTotal.Milliseconds())/runs/3, "snapshot_ms/replica")
	b.ReportMetric(float64(restartTotal.Milliseconds())/runs, "restart_ms")
}

// BenchmarkCreateInFlight measures the rate of stream creates' Raft work
// (the placement read and the create's proposal, as stream.create makes
// them) on a three-replica shard already holding streams=N, with inflight
// creates running at once, as brook-bench's --failover-streams runs them.
// Reported as creates/s: if concurrent proposals share their fsyncs
// (Dragonboat saves every entry proposed since the last step in one
// write), the rate at 64 in flight is many times the rate at 1.
func BenchmarkCreateInFlight(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) { createInFlight(b, n) })
	}
}

func createInFlight(b *testing.B, n int) {
	c := newCluster(b)
	s := populate(b, c, n)
	ctx := context.Background()
	for _, inflight := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			next := 0
			began := time.Now()
			var wg sync.WaitGroup
			sem := make(chan struct{}, inflight)
			for b.Loop() {
				sem <- struct{}{}
				i := next
				next++
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					name := fmt.Sprintf("b%d-%d-%d", n, inflight, i)
					if _, err := s.Read(ctx, state.QueryPlacement{Stream: name}); err != nil {
						b.Error(err)
						return
					}
					if r := propose(b, s, benchCreateCmd(name, i)); r.Err() != nil {
						b.Error(r.Err())
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "creates/s")
		})
	}
}
