package streamlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

// variedPayloads are n records of sizes from 0 to about 5 KiB, so that
// batches are cut by their record count and by their bytes.
func variedPayloads(tag string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		size := (i * 37) % 700
		if i%50 == 7 {
			size = 5000
		}
		seed := fmt.Sprintf("%s%d.", tag, i)
		out[i] = bytes.Repeat([]byte(seed), size/len(seed)+1)[:size]
	}
	return out
}

func batchKeys(t *testing.T, s *Store, id uint64) (n int) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: batchKey(id, 0), UpperBound: recordLogEnd(id)})
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkRecords reads the copy every way a reader can and compares it with
// want, the records from head on.
func checkRecords(t *testing.T, c *Copy, head uint64, want [][]byte) {
	t.Helper()
	tail := head + uint64(len(want))
	if tl := c.Tails(); tl.Record != tail || tl.Head != head {
		t.Fatalf("tails %+v, want head %d tail %d", tl, head, tail)
	}
	for from := head; from <= tail; from += 13 {
		for _, lim := range []struct{ recs, bytes int }{{0, 0}, {1, 0}, {300, 0}, {0, 4000}} {
			got, err := c.Read(from, lim.recs, lim.bytes, tail)
			if err != nil {
				t.Fatalf("read from %d %+v: %v", from, lim, err)
			}
			if len(got) == 0 && from < tail {
				t.Fatalf("read from %d %+v: nothing", from, lim)
			}
			if lim.recs > 0 && len(got) > lim.recs {
				t.Fatalf("read from %d %+v: %d records", from, lim, len(got))
			}
			for i, r := range got {
				if r.Offset != from+uint64(i) || !bytes.Equal(r.Data, want[r.Offset-head]) {
					t.Fatalf("read from %d %+v: record %d at %d is wrong", from, lim, i, r.Offset)
				}
			}
			if lim == (struct{ recs, bytes int }{}) && uint64(len(got)) != tail-from {
				t.Fatalf("read from %d: %d records, want %d", from, len(got), tail-from)
			}
		}
		// A reader capped below the tail stops there, inside a batch.
		if from < tail {
			got, err := c.Read(from, 0, 0, from+1)
			if err != nil || len(got) != 1 || got[0].Offset != from {
				t.Fatalf("read from %d below %d: %v %d records", from, from+1, err, len(got))
			}
		}
	}
	if head > 0 {
		if _, err := c.Read(head-1, 0, 0, tail); !errors.Is(err, ErrBelowHead) {
			t.Fatalf("read below the head: %v", err)
		}
	}
}

// checkDigests compares DigestAt at every held offset with the chain over
// all records from 0.
func checkDigests(t *testing.T, c *Copy, head uint64, all [][]byte) {
	t.Helper()
	for off := head; off <= uint64(len(all)); off++ {
		d, err := c.DigestAt(off)
		if err != nil || formatDigest(d) != refDigest(0, 0, all[:off]) {
			t.Fatalf("DigestAt(%d) = %x, %v; want %s", off, d, err, refDigest(0, 0, all[:off]))
		}
	}
}

// TestBatchesCutAndRetainedInside writes records in batches of irregular
// bounds, then cuts the log inside a batch and retains from inside
// another, reopening the store after each step: every read, every digest
// and the tails agree with a plain list of the records.
func TestBatchesCutAndRetainedInside(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreateAtEpoch1(t, s, "s", 1)
	all := variedPayloads("a", 700)
	mustAppend(t, c, all[:650])
	for i := 650; i < 700; i += 10 {
		mustAppend(t, c, all[i:i+10])
	}
	if n := batchKeys(t, s, c.id); n < 4+5 || n > 100 {
		t.Fatalf("%d batches for 650 records in one append and 5 of 10", n)
	}
	checkRecords(t, c, 0, all)
	checkDigests(t, c, 0, all)

	// Cut inside a batch of the first append (not at one of its bounds:
	// its batches hold at most 256 records).
	const cutAt = 301
	res, err := c.CutToHistory(2, []wire.HistoryStart{{Epoch: 1}, {Epoch: 2, RecordTail: cutAt}})
	if err != nil || !res.Cut || res.RecordTail != cutAt {
		t.Fatalf("cut: %+v %v", res, err)
	}
	all = all[:cutAt]
	checkRecords(t, c, 0, all)
	checkDigests(t, c, 0, all)
	if c.Digest() != refDigest(0, 0, all) {
		t.Fatalf("digest after the cut %s", c.Digest())
	}
	_ = s.Close()
	s = openTest(t, dir, nil)
	c = s.Get("s")
	checkRecords(t, c, 0, all)
	checkDigests(t, c, 0, all)

	// The log goes on from the cut.
	if err := c.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	more := variedPayloads("b", 400)
	mustAppend(t, c, more)
	all = append(all, more...)
	checkRecords(t, c, 0, all)

	// Retention from inside a batch.
	if err := c.SetRetention(wire.Retention{MaxRecords: 333}); err != nil {
		t.Fatal(err)
	}
	if err := c.EnforceRetention(time.Now(), ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	head := uint64(len(all) - 333)
	checkRecords(t, c, head, all[head:])
	checkDigests(t, c, head, all)
	_ = s.Close()
	s = openTest(t, dir, nil)
	c = s.Get("s")
	checkRecords(t, c, head, all[head:])
	checkDigests(t, c, head, all)
	if c.Digest() != refDigest(0, 0, all) {
		t.Fatalf("digest after reopen %s", c.Digest())
	}
	_ = s.Close()
}

// A follower re-sent records it holds, across batch bounds, compares them
// with what it holds: the same records are skipped, another one is a fork.
func TestApplyOverlapAcrossBatches(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "s", 1)
	all := variedPayloads("a", 600)
	recs := make([]Record, len(all))
	for i, d := range all {
		recs[i] = Record{Offset: uint64(i), TimeNS: 1, Data: d}
	}
	ctx := t.Context()
	if err := c.Apply(ctx, recs[:500]); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, recs[200:600]); err != nil {
		t.Fatalf("overlap of held records: %v", err)
	}
	checkRecords(t, c, 0, all)
	bad := append([]Record(nil), recs[250:300]...)
	bad[40] = Record{Offset: bad[40].Offset, Data: []byte("other")}
	if err := c.Apply(ctx, bad); !errors.Is(err, ErrDiverged) {
		t.Fatalf("a different record in the overlap: %v", err)
	}
}

// Corrupt batch values are errors, never a panic or a wrong record.
func TestOpenBatchRejectsCorruption(t *testing.T) {
	good := func() kv {
		var c copyImpl
		r := c.prepareRecords([][]byte{[]byte("x"), []byte("yy")}, nil, 0)
		r.assign(1, 10, 0, 0)
		return r.kvs[0]
	}
	walk := func(e kv) error {
		b, err := openBatch(e.k, e.v)
		if err != nil {
			return err
		}
		for {
			if _, _, err := b.entry(); err != nil {
				return err
			}
			more, err := b.advance()
			if err != nil || !more {
				return err
			}
		}
	}
	if err := walk(good()); err != nil {
		t.Fatalf("a good batch: %v", err)
	}
	for name, mutate := range map[string]func(e *kv){
		"short":          func(e *kv) { e.v = e.v[:2] },
		"zero count":     func(e *kv) { e.v[3] = 0 },
		"count too high": func(e *kv) { e.v[3] = 3 },
		"count past 0":   func(e *kv) { putBatchKey(e.k, 1, 0) },
		"truncated":      func(e *kv) { e.v = e.v[:len(e.v)-1] },
		"trailing":       func(e *kv) { e.v = append(e.v, 0) },
		"short entry":    func(e *kv) { e.v[7] = 3 },
	} {
		e := good()
		mutate(&e)
		if err := walk(e); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestOpenMovesLayoutOne opens a store of layout 1 (a key per record) whose
// move to batches a crash interrupted: the first records are in a batch
// already, the rest in layout-1 keys. Open moves the rest; every record,
// digest and tail is as before, and no layout-1 key is left.
func TestOpenMovesLayoutOne(t *testing.T) {
	// Layout 1 as its build left it, and a move a crash interrupted after
	// the version changed (the move mark is still there).
	t.Run("from layout 1", func(t *testing.T) { testMoveLayoutOne(t, false) })
	t.Run("interrupted", func(t *testing.T) { testMoveLayoutOne(t, true) })
	// The move's iterator opened again after every batch it writes.
	t.Run("iterator reopened", func(t *testing.T) {
		defer func(n int) { moveReopenEvery = n }(moveReopenEvery)
		moveReopenEvery = 1
		testMoveLayoutOne(t, false)
	})
}

func testMoveLayoutOne(t *testing.T, interrupted bool) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "s", 1)
	other := mustCreate(t, s, "o", 2)
	ids := []uint64{c.id, other.id}
	_ = s.Close()

	all := variedPayloads("a", 600)
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{l: quietLogger(), s: &impl{}}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], 1)
	if interrupted {
		binary.BigEndian.PutUint64(v[:], layoutVersion)
		_ = b.Set(movingKey, []byte{1}, nil)
	}
	_ = b.Set(versionKey, v[:], nil)
	for _, id := range ids {
		// Records 0-99: moved before the crash.
		var cp copyImpl
		r := cp.prepareRecords(all[:100], nil, 7)
		r.assign(id, 0, 0, 0)
		for _, e := range r.kvs {
			_ = b.Set(e.k, e.v, nil)
		}
		d, cum := r.recDigest, r.recCum
		// Records 100-599: a key each, as layout 1 wrote them.
		for off := 100; off < len(all); off++ {
			d = chainDigest(d, uint64(off), all[off])
			cum += uint64(len(all[off]))
			val := make([]byte, recordHeaderLen+len(all[off]))
			putRecordValue(val, recordMeta{digest: d, cum: cum, timeNS: 7}, all[off])
			_ = b.Set(offsetKey(id, tagRecordV1, uint64(off)), val, nil)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, dir, nil)
	for _, name := range []string{"s", "o"} {
		c := s.Get(name)
		checkRecords(t, c, 0, all)
		checkDigests(t, c, 0, all)
		if c.Digest() != refDigest(0, 0, all) {
			t.Fatalf("%s: digest %s", name, c.Digest())
		}
		got, err := c.Read(0, 1, 0, 1)
		if err != nil || got[0].TimeNS != 7 {
			t.Fatalf("%s: the record's time was not kept: %+v %v", name, got, err)
		}
		if n := batchKeys(t, s, c.id); n < 3 {
			t.Fatalf("%s: %d batches", name, n)
		}
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == offsetKeyLen && k[0] == prefixCopy && k[9] == tagRecordV1 {
			t.Fatalf("layout-1 key %x left", k)
		}
	}
	_ = it.Close()
	if v, err := getValue(s.db, versionKey); err != nil || binary.BigEndian.Uint64(v) != layoutVersion {
		t.Fatalf("layout version %x %v", v, err)
	}
	if v, err := getValue(s.db, movingKey); err != nil || v != nil {
		t.Fatalf("the move mark is left: %x %v", v, err)
	}
	// And it goes on: an append after the move chains from the moved tail.
	more := variedPayloads("b", 10)
	mustAppend(t, s.Get("s"), more)
	checkRecords(t, s.Get("s"), 0, append(all, more...))
}

// A cut to a head that lies inside a batch leaves no batch behind: what it
// would keep is all below the head, and nothing would ever delete it.
func TestCutToTheHeadInsideABatch(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreateAtEpoch1(t, s, "s", 1)
	all := payloads("a", 0, 256)
	mustAppend(t, c, all) // one batch: 0-255
	if err := c.SetRetention(wire.Retention{MaxRecords: 156}); err != nil {
		t.Fatal(err)
	}
	if err := c.EnforceRetention(time.Now(), ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if tl := c.Tails(); tl.Head != 100 {
		t.Fatalf("head %d after retention", tl.Head)
	}
	res, err := c.CutToHistory(2, []wire.HistoryStart{{Epoch: 1}, {Epoch: 2, RecordTail: 50}})
	if err != nil || res.RecordTail != 100 {
		t.Fatalf("cut: %+v %v", res, err)
	}
	if n := batchKeys(t, s, c.id); n != 0 {
		t.Fatalf("%d batches left with head = tail = 100", n)
	}
	if c.Digest() != refDigest(0, 0, all[:100]) {
		t.Fatalf("digest %s after the cut", c.Digest())
	}
}
