package streamlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openTest opens a store in dir and closes it at the end of the test
// unless the test closed it.
func openTest(t testing.TB, dir string, configure func(*impl)) *Store {
	t.Helper()
	s, err := openWith(Options{Dir: dir, Logger: quietLogger(), CursorSyncInterval: time.Hour}, configure)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// mustCreateAtEpoch1 creates a copy and begins its epoch 1, as an owner's.
func mustCreateAtEpoch1(t testing.TB, s *Store, name string, id uint64) *Copy {
	t.Helper()
	c := mustCreate(t, s, name, id)
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	return c
}

func mustCreate(t testing.TB, s *Store, name string, id uint64) *Copy {
	t.Helper()
	c, err := s.Create(name, id, wire.Retention{})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return c
}

// payloads returns n distinct payloads tagged with tag.
func payloads(tag string, from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s-%06d", tag, from+i)
	}
	return out
}

func mustAppend(t testing.TB, c *Copy, data [][]byte) uint64 {
	t.Helper()
	first, err := c.Append(context.Background(), data)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return first
}

// readAll reads every record of c from its head.
func readAll(t testing.TB, c *Copy) []Record {
	t.Helper()
	tl := c.Tails()
	var out []Record
	for from := tl.Head; from < tl.Record; {
		recs, err := c.Read(from, 1000, 0, tl.Record)
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if len(recs) == 0 {
			t.Fatalf("read from %d: no records below tail %d", from, tl.Record)
		}
		out = append(out, recs...)
		from = recs[len(recs)-1].Offset + 1
	}
	return out
}

func dataOf(recs []Record) [][]byte {
	out := make([][]byte, len(recs))
	for i, r := range recs {
		out[i] = r.Data
	}
	return out
}

func equalData(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// refDigest recomputes the running digest independently of the store:
// d(o+1) = xxhash64(d(o) || o || data) from seed at offset from.
func refDigest(seed, from uint64, data [][]byte) string {
	d := seed
	for i, p := range data {
		var buf []byte
		buf = binary.BigEndian.AppendUint64(buf, d)
		buf = binary.BigEndian.AppendUint64(buf, from+uint64(i))
		buf = append(buf, p...)
		d = xxhash.Sum64(buf)
	}
	return fmt.Sprintf("%016x", d)
}

// waitFor waits (bounded) until cond holds, re-checking at every change of
// c; it fails the test on timeout.
func waitFor(t testing.TB, c *Copy, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := c.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
