package streamlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/brook-streams/brook/pkg/wire"
)

// TestReadWrittenBeforeDurable holds the committer so that appends stay
// queued, and checks that ReadWritten and DigestAt serve them (offsets,
// data, time and digest as they become durable), Changed wakes for them,
// while Read, the durable tail and a seal see only durable records.
func TestReadWrittenBeforeDurable(t *testing.T) {
	c, hold := gatedCopy(t)

	hold.Lock()
	ch := c.Changed()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Append(context.Background(), payloads("queued", 3*i, 3)); err != nil {
				t.Error(err)
			}
		}()
	}
	<-ch // an append wakes the copy's waiters at once
	waitFor(t, c, "both appends written", func() bool { return c.Tails().RecordWritten == 8 })
	tl := c.Tails()
	if tl.Record != 2 {
		t.Fatalf("durable tail %d with the commit held, want 2", tl.Record)
	}
	if recs, err := c.Read(0, 0, 0, 100); err != nil || len(recs) != 2 {
		t.Fatalf("Read returned %d records (%v), want the 2 durable ones", len(recs), err)
	}
	recs, err := c.ReadWritten(1, 0, 0, 100)
	if err != nil || len(recs) != 7 {
		t.Fatalf("ReadWritten returned %d records (%v), want 7", len(recs), err)
	}
	for i, r := range recs {
		if r.Offset != uint64(1+i) || r.TimeNS == 0 {
			t.Fatalf("record %d: offset %d time %d", i, r.Offset, r.TimeNS)
		}
	}
	if got, err := c.ReadWritten(3, 2, 0, 100); err != nil || len(got) != 2 || got[0].Offset != 3 {
		t.Fatalf("ReadWritten(3, max 2) = %d records from %v (%v)", len(got), got, err)
	}
	if got, err := c.ReadWritten(3, 0, 0, 5); err != nil || len(got) != 2 {
		t.Fatalf("ReadWritten(3, below 5) = %d records (%v), want 2", len(got), err)
	}
	var digests []uint64
	for off := uint64(3); off <= 8; off++ {
		d, err := c.DigestAt(off)
		if err != nil {
			t.Fatalf("DigestAt(%d) of a written record: %v", off, err)
		}
		digests = append(digests, d)
	}
	if _, err := c.DigestAt(9); err == nil {
		t.Fatal("DigestAt past the written tail answered")
	}

	hold.Unlock()
	wg.Wait()
	tl = c.Tails()
	if tl.Record != 8 || tl.RecordWritten != 8 {
		t.Fatalf("tails after the commit: %+v", tl)
	}
	durable := readAll(t, c)
	for i, r := range recs {
		d := durable[1+i]
		if d.Offset != r.Offset || string(d.Data) != string(r.Data) || d.TimeNS != r.TimeNS {
			t.Fatalf("written record %d %q at %d differs from durable %q at %d", i, r.Data, r.TimeNS, d.Data, d.TimeNS)
		}
	}
	for i, off := 0, uint64(3); off <= 8; i, off = i+1, off+1 {
		if d, err := c.DigestAt(off); err != nil || d != digests[i] {
			t.Fatalf("digest at %d: %x when written, %x (%v) when durable", off, digests[i], d, err)
		}
	}
	if c.written != nil {
		t.Fatalf("%d requests still listed as written after their commit", len(c.written))
	}
}

// TestAppendWrittenReturnsBeforeDurable: AppendWritten returns with the
// records written (offsets in order, the written tail past them) while the
// group commit is held, durable waits for that commit, and a second call of
// durable is an error rather than a second wait.
func TestAppendWrittenReturnsBeforeDurable(t *testing.T) {
	c, hold := gatedCopy(t)

	hold.Lock()
	ctx := context.Background()
	first1, durable1, err := c.AppendWritten(ctx, payloads("a", 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	first2, durable2, err := c.AppendWritten(ctx, payloads("b", 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	if first1 != 2 || first2 != 5 {
		t.Fatalf("written at %d and %d, want 2 and 5", first1, first2)
	}
	if tl := c.Tails(); tl.RecordWritten != 7 || tl.Record != 2 {
		t.Fatalf("tails %+v with the commit held: want written 7, durable 2", tl)
	}
	done := make(chan error, 1)
	go func() { done <- durable1(ctx) }()
	hold.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := durable2(ctx); err != nil {
		t.Fatal(err)
	}
	if tl := c.Tails(); tl.Record != 7 {
		t.Fatalf("durable tail %d after both commits, want 7", tl.Record)
	}
	if err := durable1(ctx); err == nil {
		t.Fatal("durable called twice returned nil")
	}
}

// gatedCopy opens a store whose committer waits before each group commit
// while hold is locked, and returns a copy with 2 durable records.
func gatedCopy(t *testing.T) (*Copy, *sync.Mutex) {
	t.Helper()
	hold := &sync.Mutex{}
	s := openTest(t, t.TempDir(), func(s *impl) {
		s.beforeCommit = func() { hold.Lock(); hold.Unlock() } //nolint:staticcheck // a gate, not a critical section
	})
	c := mustCreate(t, s, "w", 1)
	mustAppend(t, c, payloads("durable", 0, 2))
	return c, hold
}

// TestApplyWrittenReturnsBeforeDurable: a follower's ApplyWritten returns
// with the records written while the group commit is held (written tail
// and its digest past them, the durable tail not), a second batch from the
// written tail is taken at once, the durable funcs wait for the commit,
// and an apply of records the copy already holds is durable at once.
func TestApplyWrittenReturnsBeforeDurable(t *testing.T) {
	c, hold := gatedCopy(t)
	ctx := context.Background()
	recs := func(from uint64, n int) []Record {
		out := make([]Record, n)
		for i := range out {
			out[i] = Record{Offset: from + uint64(i), TimeNS: int64(from) + int64(i) + 1, Data: []byte(fmt.Sprintf("r%d", from+uint64(i)))}
		}
		return out
	}

	hold.Lock()
	durable1, err := c.ApplyWritten(ctx, recs(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	durable2, err := c.ApplyWritten(ctx, recs(5, 2))
	if err != nil {
		t.Fatal(err)
	}
	tl := c.Tails()
	if tl.Record != 2 || tl.RecordWritten != 7 {
		t.Fatalf("tails with the commit held: durable %d written %d, want 2 and 7", tl.Record, tl.RecordWritten)
	}
	if d, err := c.DigestAt(7); err != nil || d != tl.WrittenDigest {
		t.Fatalf("written digest %x, DigestAt(7) %x (%v)", tl.WrittenDigest, d, err)
	}
	if tl.WrittenDigest == tl.RecordDigest {
		t.Fatal("written digest equals the durable one with records queued")
	}
	written := tl.WrittenDigest
	// A durable wait that gives up reports it; the write still lands.
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := durable1(short); err == nil {
		t.Fatal("durable with a cancelled context returned nil while the commit is held")
	}
	hold.Unlock()
	if err := durable2(ctx); err != nil {
		t.Fatal(err)
	}
	if err := durable2(ctx); !errors.Is(err, errDurableTwice) {
		t.Fatalf("second durable call: %v, want errDurableTwice", err)
	}
	tl = c.Tails()
	if tl.Record != 7 || tl.RecordWritten != 7 || tl.RecordDigest != written || tl.WrittenDigest != written {
		t.Fatalf("tails after the commit: %+v, want durable = written = 7 at digest %x", tl, written)
	}
	got := readAll(t, c)
	for _, r := range recs(2, 5) {
		if g := got[r.Offset]; string(g.Data) != string(r.Data) || g.TimeNS != r.TimeNS {
			t.Fatalf("record %d: %q at %d, want %q at %d", r.Offset, g.Data, g.TimeNS, r.Data, r.TimeNS)
		}
	}
	// Records already held: nothing written, durable at once.
	again, err := c.ApplyWritten(ctx, recs(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := again(ctx); err != nil {
		t.Fatal(err)
	}
	// A batch past the written tail is a gap.
	if _, err := c.ApplyWritten(ctx, recs(9, 1)); !errors.Is(err, ErrGap) {
		t.Fatalf("apply past the tail: %v, want ErrGap", err)
	}
}

// TestWrittenChangedNotWokenByDurable: WrittenChanged is closed when
// records are written (an owner's append), not again when their group
// commit makes them durable (Changed is); it is closed by the group commit
// of records applied unannounced (a follower's) and by cursor events made
// durable.
func TestWrittenChangedNotWokenByDurable(t *testing.T) {
	c, hold := gatedCopy(t)
	ctx := context.Background()
	hold.Lock()
	wch := c.WrittenChanged()
	_, durable, err := c.AppendWritten(ctx, payloads("a", 0, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !isClosedCh(wch) {
		t.Fatal("WrittenChanged not closed by an append's written records")
	}
	wch, ch := c.WrittenChanged(), c.Changed()
	hold.Unlock()
	if err := durable(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosedCh(ch) {
		t.Fatal("Changed not closed by the append's group commit")
	}
	if isClosedCh(wch) {
		t.Fatal("WrittenChanged closed again by the group commit of records it was woken for when written")
	}

	// Cursor events made durable wake it.
	if _, err := c.AppendCursor("r", 1); err != nil {
		t.Fatal(err)
	}
	wch = c.WrittenChanged()
	if err := c.SyncCursors(); err != nil {
		t.Fatal(err)
	}
	if !isClosedCh(wch) {
		t.Fatal("WrittenChanged not closed by cursor events made durable")
	}

	// A follower's apply does not signal when written: its group commit
	// does, on both.
	f, fhold := gatedCopy(t)
	fhold.Lock()
	fdurable, err := f.ApplyWritten(ctx, []Record{{Offset: 2, TimeNS: 1, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	wch = f.WrittenChanged()
	fhold.Unlock()
	if err := fdurable(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosedCh(wch) {
		t.Fatal("WrittenChanged not closed by the group commit of applied records")
	}
}

// isClosedCh reports whether ch is closed.
func isClosedCh(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWrittenChangedOnFailedCommit: an owner's append whose group commit
// fails closes WrittenChanged again, although its records were announced
// when written: a long poll parked on it must wake and see the failure.
func TestWrittenChangedOnFailedCommit(t *testing.T) {
	fault := &walFault{kinds: []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}}
	hold := &sync.Mutex{}
	s, err := openWith(Options{Dir: t.TempDir(), Logger: quietLogger(), CursorSyncInterval: time.Hour, FS: errorfs.Wrap(vfs.Default, fault)},
		func(s *impl) { s.beforeCommit = func() { hold.Lock(); hold.Unlock() } }) //nolint:staticcheck // a gate, not a critical section
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := mustCreate(t, s, "w", 1)
	ctx := context.Background()
	hold.Lock()
	_, durable, err := c.AppendWritten(ctx, payloads("a", 0, 2))
	if err != nil {
		hold.Unlock()
		t.Fatal(err)
	}
	wch := c.WrittenChanged() // after the append's own signal
	fault.on.Store(true)
	hold.Unlock()
	if err := durable(ctx); err == nil {
		t.Fatal("append durable with its WAL sync failing")
	}
	if !isClosedCh(wch) {
		t.Fatal("WrittenChanged not closed by the failed group commit of an announced append")
	}
}

// TestWrittenChangedOnMetadataChanges: a cut, a reset and a seal each
// close WrittenChanged (and Changed).
func TestWrittenChangedOnMetadataChanges(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "m", 1)
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("old", 0, 6))
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"cut", func() error {
			res, err := c.CutToHistory(2, []wire.HistoryStart{{Epoch: 1, Node: "n1"}, {Epoch: 2, RecordTail: 4, Node: "n2"}})
			if err == nil && (!res.Cut || c.Tails().Record != 4) {
				return fmt.Errorf("cut %+v, tails %+v: want a cut to 4", res, c.Tails())
			}
			return err
		}},
		{"reset", func() error { return c.ResetTo(10, 0) }},
		{"seal", func() error { _, err := c.Seal(3, 1); return err }},
	} {
		wch, ch := c.WrittenChanged(), c.Changed()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if !isClosedCh(wch) || !isClosedCh(ch) {
			t.Fatalf("%s: WrittenChanged closed %v, Changed closed %v; want both", step.name, isClosedCh(wch), isClosedCh(ch))
		}
	}
}
