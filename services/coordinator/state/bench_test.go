package state

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/brook-streams/brook/pkg/wire"
)

// benchState is n streams of three copies spread round-robin over four
// live hosts, each created through Apply.
func benchState(b *testing.B, n int) *State {
	b.Helper()
	s := New()
	hosts := []string{"h1", "h2", "h3", "h4"}
	for _, h := range hosts {
		s.Apply(NodeSeen(h, 1, 1000))
	}
	for i := range n {
		a := wire.Assignment{Owner: hosts[i%4], Followers: []string{hosts[(i+1)%4], hosts[(i+2)%4]}, Policy: "majority_durable"}
		if r := s.Apply(StreamCreate(fmt.Sprintf("s%05d", i), 3, "", wire.Retention{}, a, 1000)); r.Err() != nil {
			b.Fatal(r.Err())
		}
	}
	return s
}

// BenchmarkSnapshot measures saving and loading the state of n streams
// (what a Raft snapshot and a coordinator restart cost), with its size.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{1000, 3000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			s := benchState(b, n)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := s.Save(&buf); err != nil {
					b.Fatal(err)
				}
				if _, err := Load(bytes.NewReader(buf.Bytes())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "snapshot_bytes")
		})
	}
}

// BenchmarkIndexRebuild measures building the index from n streams, which
// loading a snapshot adds to decoding it.
func BenchmarkIndexRebuild(b *testing.B) {
	s := benchState(b, 10000)
	for b.Loop() {
		s.idx = nil
		s.ix()
	}
}

// BenchmarkSnapshotHold measures how long a Raft snapshot of n streams
// holds the state machine's applies off: held=save is the encoding of the
// whole state, which Dragonboat ran with applies held off while the
// machine was a regular one; held=copy is SnapshotCopy, all that is held
// now (raftstore's concurrent machine encodes the copy while applies go
// on). Both grow with n; the second by far less.
func BenchmarkSnapshotHold(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := benchState(b, n)
		b.Run(fmt.Sprintf("held=save/streams=%d", n), func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := s.Save(&buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("held=copy/streams=%d", n), func(b *testing.B) {
			for b.Loop() {
				if c := s.SnapshotCopy(); len(c.Streams) != n {
					b.Fatalf("%d streams copied", len(c.Streams))
				}
			}
		})
	}
}

// BenchmarkPages measures paging through every stream of a 10,000-stream
// state: the admin stream list (QueryStreamPage, 256 a page) and a host's
// full assignment pull (AssignmentPage, wire.MaxAssignmentPage a page).
// Each page's cost should follow the page, not the streams there are.
func BenchmarkPages(b *testing.B) {
	s := benchState(b, 10000)
	// pages asks page for pages from the first until it names no next
	// one, and fails unless there were want.
	pages := func(b *testing.B, want int, page func(after string) (next string)) {
		n := 0
		for after := page(""); ; after = page(after) {
			n++
			if after == "" {
				break
			}
		}
		if n != want {
			b.Fatalf("%d pages, want %d", n, want)
		}
	}
	b.Run("stream.list", func(b *testing.B) {
		for b.Loop() {
			pages(b, 40, func(after string) string {
				return QueryStreamPage{After: after, Limit: 256}.Run(s).(StreamPage).Next
			})
		}
	})
	b.Run("assignment.pull", func(b *testing.B) {
		for b.Loop() {
			pages(b, 10, func(after string) string { return s.AssignmentPage("h1", after, 0).Next })
		}
	})
}
