package streamlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/brook-streams/brook/pkg/wire"
)

func TestAppendReadAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "orders", 7)
	if got := mustAppend(t, c, payloads("a", 0, 3)); got != 0 {
		t.Fatalf("first append at %d, want 0", got)
	}
	if got := mustAppend(t, c, payloads("a", 3, 5)); got != 3 {
		t.Fatalf("second append at %d, want 3", got)
	}
	if tl := c.Tails(); tl.Record != 8 || tl.Head != 0 {
		t.Fatalf("tails %+v, want record 8 head 0", tl)
	}
	// Bounds: records, bytes, below.
	recs, err := c.Read(2, 3, 0, 100)
	if err != nil || len(recs) != 3 || recs[0].Offset != 2 || string(recs[2].Data) != "a-000004" {
		t.Fatalf("read by count: %v %+v", err, recs)
	}
	recs, err = c.Read(0, 0, 17, 100) // each payload is 8 bytes: two fit, a third would not
	if err != nil || len(recs) != 2 {
		t.Fatalf("read by bytes: %v, %d records, want 2", err, len(recs))
	}
	recs, err = c.Read(0, 0, 1, 100) // at least one record even if it is larger
	if err != nil || len(recs) != 1 {
		t.Fatalf("read with tiny byte bound: %v, %d records, want 1", err, len(recs))
	}
	recs, err = c.Read(5, 0, 0, 6)
	if err != nil || len(recs) != 1 || recs[0].Offset != 5 {
		t.Fatalf("read below 6: %v %+v", err, recs)
	}
	if recs, err = c.Read(8, 0, 0, 100); err != nil || len(recs) != 0 {
		t.Fatalf("read at tail: %v %+v", err, recs)
	}
	if recs[0:0] == nil && false {
		t.Fatal()
	}
	if recs, _ := c.Read(0, 1, 0, 100); recs[0].TimeNS == 0 {
		t.Fatal("record has no owner timestamp")
	}
	digest := c.Digest()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := c.Append(context.Background(), payloads("x", 0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v, want ErrClosed", err)
	}

	s2 := openTest(t, dir, nil)
	c2 := s2.Get("orders")
	if c2 == nil || c2.StreamID() != 7 || c2.Stream() != "orders" {
		t.Fatalf("reopened copy: %+v", c2)
	}
	if !equalData(dataOf(readAll(t, c2)), payloads("a", 0, 8)) {
		t.Fatal("records changed across reopen")
	}
	if c2.Digest() != digest || digest != refDigest(0, 0, payloads("a", 0, 8)) {
		t.Fatalf("digest %s after reopen, %s before, want %s", c2.Digest(), digest, refDigest(0, 0, payloads("a", 0, 8)))
	}
	if got := mustAppend(t, c2, payloads("a", 8, 1)); got != 8 {
		t.Fatalf("append after reopen at %d, want 8", got)
	}
}

func TestCreateIdempotentAndExists(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "a", 1)
	c2, err := s.Create("a", 1, wire.Retention{MaxRecords: 5})
	if err != nil || c2 != c {
		t.Fatalf("create again with same id: %v, same copy %v", err, c2 == c)
	}
	if _, err := s.Create("a", 2, wire.Retention{}); !errors.Is(err, ErrExists) {
		t.Fatalf("create with another id: %v, want ErrExists", err)
	}
	mustCreate(t, s, "b", 3)
	if names := []string{s.Copies()[0].Stream(), s.Copies()[1].Stream()}; !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("copies %v", names)
	}
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	if _, err := s2.Create("a", 2, wire.Retention{}); !errors.Is(err, ErrExists) {
		t.Fatalf("create with another id after reopen: %v, want ErrExists", err)
	}
	if s2.Get("nope") != nil {
		t.Fatal("Get of a missing copy is not nil")
	}
}

func TestApplyRules(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "f", 1)
	ctx := context.Background()
	mk := func(from int, data [][]byte) []Record {
		out := make([]Record, len(data))
		for i, d := range data {
			out[i] = Record{Offset: uint64(from + i), TimeNS: int64(1000 + from + i), Data: d}
		}
		return out
	}
	owner := payloads("o", 0, 10)
	if err := c.Apply(ctx, mk(0, owner[:4])); err != nil {
		t.Fatalf("apply 0..4: %v", err)
	}
	if err := c.Apply(ctx, mk(5, owner[5:6])); !errors.Is(err, ErrGap) {
		t.Fatalf("apply at 5 with tail 4: %v, want ErrGap", err)
	}
	// Identical overlap is skipped, the rest appended.
	if err := c.Apply(ctx, mk(2, owner[2:7])); err != nil {
		t.Fatalf("apply 2..7 overlapping: %v", err)
	}
	if tl := c.Tails(); tl.Record != 7 {
		t.Fatalf("tail %d, want 7", tl.Record)
	}
	// Entirely held: nothing to do.
	if err := c.Apply(ctx, mk(0, owner[:3])); err != nil {
		t.Fatalf("apply held prefix: %v", err)
	}
	other := slices.Clone(owner)
	other[3] = []byte("different")
	if err := c.Apply(ctx, mk(3, other[3:8])); !errors.Is(err, ErrDiverged) {
		t.Fatalf("apply diverging overlap: %v, want ErrDiverged", err)
	}
	if tl := c.Tails(); tl.Record != 7 {
		t.Fatalf("tail %d after a diverged apply, want 7", tl.Record)
	}
	bad := mk(7, owner[7:9])
	bad[1].Offset = 9
	if err := c.Apply(ctx, bad); err == nil {
		t.Fatal("apply of non-contiguous records succeeded")
	}
	if err := c.Apply(ctx, mk(7, owner[7:10])); err != nil {
		t.Fatalf("apply 7..10: %v", err)
	}
	got := readAll(t, c)
	if !equalData(dataOf(got), owner) {
		t.Fatal("follower log differs from the owner's")
	}
	if got[8].TimeNS != 1008 {
		t.Fatalf("applied record keeps time %d, want the owner's 1008", got[8].TimeNS)
	}
}

// TestDigestOwnerFollower checks that an owner and a follower holding the
// same records have the same digest however the records were batched.
func TestDigestOwnerFollower(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	owner := mustCreate(t, s, "o", 1)
	follower := mustCreate(t, s, "f", 1)
	all := payloads("r", 0, 50)
	for i := 0; i < 50; i += 7 {
		mustAppend(t, owner, all[i:min(i+7, 50)])
	}
	recs := readAll(t, owner)
	for i := 0; i < 50; i += 3 {
		if err := follower.Apply(context.Background(), recs[i:min(i+5, 50)]); err != nil {
			t.Fatalf("apply at %d: %v", i, err)
		}
	}
	if owner.Digest() != follower.Digest() {
		t.Fatalf("owner digest %s, follower %s", owner.Digest(), follower.Digest())
	}
	if want := refDigest(0, 0, all); owner.Digest() != want {
		t.Fatalf("digest %s, want %s", owner.Digest(), want)
	}
	mustAppend(t, owner, [][]byte{[]byte("x")})
	if err := follower.Apply(context.Background(), []Record{{Offset: 50, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if owner.Digest() == follower.Digest() {
		t.Fatal("different last records give the same digest")
	}
}

func TestSealRules(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "s", 1)
	ctx := context.Background()
	if err := c.BeginEpoch(3); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("r", 0, 4))
	if _, err := c.AppendCursor("c1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Seal(2, 1); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("seal below the copy's epoch: %v, want ErrStaleFence", err)
	}
	// A fence is the next epoch: the copy has begun epoch 3, so a seal at
	// 3 comes from a recovery that already finished (a late or repeated
	// seal) and must not stop the copy.
	if _, err := c.Seal(3, 99); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("seal at the copy's epoch: %v, want ErrStaleFence", err)
	}
	if _, ok := c.SealInfo(); ok {
		t.Fatal("a refused seal left the copy sealed")
	}
	st, err := c.Seal(4, 10)
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	wantEpochs := []wire.LogEpoch{{Epoch: 3}}
	if st.Seal.FenceEpoch != 4 || st.Seal.Transition != 10 || !slices.Equal(st.Seal.Replaced, wantEpochs) ||
		st.Tails.Record != 4 || st.Tails.CursorWritten != 1 || st.Tails.CursorDurable != 1 ||
		!slices.Equal(st.LogEpochs, wantEpochs) || st.Digest != refDigest(0, 0, payloads("r", 0, 4)) {
		t.Fatalf("seal state %+v", st)
	}
	if c.Epoch() != 3 {
		t.Fatalf("a seal changed the epoch to %d", c.Epoch())
	}
	if _, err := c.Append(ctx, payloads("x", 0, 1)); !errors.Is(err, ErrSealed) {
		t.Fatalf("append while sealed: %v", err)
	}
	if err := c.Apply(ctx, []Record{{Offset: 4, Data: []byte("x")}}); !errors.Is(err, ErrSealed) {
		t.Fatalf("apply while sealed: %v", err)
	}
	if _, err := c.AppendCursor("c1", 3); !errors.Is(err, ErrSealed) {
		t.Fatalf("cursor event while sealed: %v", err)
	}
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{Offset: 1, Cursor: "c", Position: 1}}); !errors.Is(err, ErrSealed) {
		t.Fatalf("apply cursor events while sealed: %v", err)
	}
	if _, err := c.Seal(4, 9); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("same fence, older transition: %v, want ErrStaleFence", err)
	}
	if _, err := c.Seal(3, 99); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("lower fence: %v, want ErrStaleFence", err)
	}
	if st, err := c.Seal(4, 10); err != nil || st.Seal.Transition != 10 {
		t.Fatalf("same fence, same transition: %v %+v", err, st.Seal)
	}
	if st, err := c.Seal(4, 11); err != nil || st.Seal.Transition != 11 || st.Seal.FenceEpoch != 4 {
		t.Fatalf("same fence, newer transition takes over: %v %+v", err, st.Seal)
	}
	if st, err := c.Seal(6, 2); err != nil || st.Seal.FenceEpoch != 6 || !slices.Equal(st.Seal.Replaced, wantEpochs) {
		t.Fatalf("higher fence: %v %+v", err, st.Seal)
	}
	_ = s.Close()

	s2 := openTest(t, dir, nil)
	c2 := s2.Get("s")
	seal, ok := c2.SealInfo()
	if !ok || seal.FenceEpoch != 6 || seal.Transition != 2 || !slices.Equal(seal.Replaced, wantEpochs) {
		t.Fatalf("seal after reopen: %v %+v", ok, seal)
	}
	if _, err := c2.Append(ctx, payloads("x", 0, 1)); !errors.Is(err, ErrSealed) {
		t.Fatalf("append while sealed after reopen: %v", err)
	}
	if err := c2.BeginEpoch(5); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("begin epoch below the fence: %v, want ErrStaleFence", err)
	}
	if err := c2.BeginEpoch(6); err != nil {
		t.Fatalf("begin epoch at the fence: %v", err)
	}
	if _, ok := c2.SealInfo(); ok {
		t.Fatal("seal not released")
	}
	if got := c2.LogEpochs(); !slices.Equal(got, []wire.LogEpoch{{Epoch: 3}, {Epoch: 6, RecordStart: 4, CursorStart: 1}}) {
		t.Fatalf("log epochs %+v", got)
	}
	if got := mustAppend(t, c2, payloads("y", 0, 1)); got != 4 {
		t.Fatalf("append after release at %d", got)
	}
	// The recovery that sealed at 6 is done and the copy began epoch 6: a
	// late copy of that seal, even with the same transition, is refused
	// and the copy keeps taking writes.
	if _, err := c2.Seal(6, 2); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("late seal at the epoch the copy began: %v, want ErrStaleFence", err)
	}
	if got := mustAppend(t, c2, payloads("y", 1, 1)); got != 5 {
		t.Fatalf("append after a refused late seal at %d", got)
	}
	if err := c2.Apply(ctx, []Record{{Offset: 6, Data: []byte("z")}}); err != nil {
		t.Fatalf("apply after a refused late seal: %v", err)
	}
}

// TestLateSealAfterRelease is the sequence a recovery produces: seal at
// e+1, release by BeginEpoch(e+1), then the same seal again (a retry that
// arrives late). The copy must stay unsealed.
func TestLateSealAfterRelease(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "late", 1)
	if err := c.BeginEpoch(1); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("r", 0, 3))
	if _, err := c.Seal(2, 7); err != nil {
		t.Fatal(err)
	}
	if err := c.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Seal(2, 7); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("late seal at the released fence: %v, want ErrStaleFence", err)
	}
	if _, err := c.Seal(2, 8); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("newer transition at the released fence: %v, want ErrStaleFence", err)
	}
	if _, sealed := c.SealInfo(); sealed {
		t.Fatal("copy sealed by a late seal")
	}
	if err := c.Apply(context.Background(), []Record{{Offset: 3, Data: []byte("x")}}); err != nil {
		t.Fatalf("apply after the late seal: %v", err)
	}
	// The next recovery's seal still works.
	if st, err := c.Seal(3, 9); err != nil || st.Seal.FenceEpoch != 3 {
		t.Fatalf("seal at the next epoch: %v %+v", err, st)
	}
}

func TestBeginEpoch(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "b", 1)
	if err := c.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("r", 0, 3))
	if err := c.BeginEpoch(2); err != nil {
		t.Fatalf("same epoch again: %v", err)
	}
	if err := c.BeginEpoch(1); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("older epoch: %v, want ErrStaleFence", err)
	}
	if _, err := c.Seal(5, 1); err != nil {
		t.Fatal(err)
	}
	// Releasing at a higher epoch than the fence is fine.
	if err := c.BeginEpoch(7); err != nil {
		t.Fatal(err)
	}
	want := []wire.LogEpoch{{Epoch: 2}, {Epoch: 7, RecordStart: 3}}
	if got := c.LogEpochs(); !slices.Equal(got, want) || c.Epoch() != 7 {
		t.Fatalf("log epochs %+v, want %+v", got, want)
	}
}

// TestSealSerializesWithAppends: once Seal returns, the tails it reported
// never grow, every append acknowledged is below them, and every append
// not below them failed with ErrSealed.
func TestSealSerializesWithAppends(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "race", 1)
	ctx := context.Background()
	var wg sync.WaitGroup
	type result struct {
		first uint64
		err   error
	}
	results := make(chan result, 10000)
	started := make(chan struct{})
	var once sync.Once
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				first, err := c.Append(ctx, payloads(fmt.Sprint(g), i, 2))
				results <- result{first, err}
				once.Do(func() { close(started) })
				if err != nil {
					return
				}
			}
		}()
	}
	<-started
	st, err := c.Seal(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	acked := 0
	for r := range results {
		switch {
		case r.err == nil:
			acked++
			if r.first+2 > st.Tails.Record {
				t.Errorf("append at %d acknowledged past the sealed tail %d", r.first, st.Tails.Record)
			}
		case !errors.Is(r.err, ErrSealed):
			t.Errorf("append failed with %v, want ErrSealed", r.err)
		}
	}
	if uint64(acked*2) != st.Tails.Record {
		t.Fatalf("%d appends of 2 acknowledged, sealed tail %d", acked, st.Tails.Record)
	}
	if c.Tails().Record != st.Tails.Record || c.Digest() != st.Digest {
		t.Fatalf("tails moved after the seal: %+v vs %+v", c.Tails(), st.Tails)
	}
}

// TestGroupCommitSharesOneBatch holds the committer on its first group so
// that appends to several copies queue up, and checks that they all commit
// in one batch, each at contiguous offsets.
func TestGroupCommitSharesOneBatch(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	s := openTest(t, t.TempDir(), func(s *impl) {
		s.beforeCommit = func() { first.Do(func() { close(entered); <-release }) }
	})
	a, b := mustCreate(t, s, "a", 1), mustCreate(t, s, "b", 2)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); mustAppend(t, a, payloads("first", 0, 1)) }()
	<-entered // the committer holds the first group
	type done struct {
		c     *Copy
		tag   string
		first uint64
	}
	results := make(chan done, 10)
	for i := range 10 {
		wg.Add(1)
		c := a
		if i%2 == 1 {
			c = b
		}
		go func() {
			defer wg.Done()
			tag := fmt.Sprint("g", i)
			off, err := c.Append(ctx, payloads(tag, 0, 3))
			if err != nil {
				t.Error(err)
			}
			results <- done{c, tag, off}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.qmu.Lock()
		l := len(s.queue)
		s.qmu.Unlock()
		if l == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d requests, want 10", l)
		}
		time.Sleep(time.Millisecond) // waiting for goroutines to enqueue, not an assertion
	}
	close(release)
	wg.Wait()
	close(results)
	if g, r := s.stats.groups.Load(), s.stats.requests.Load(); g != 2 || r != 11 {
		t.Fatalf("%d groups for %d requests, want 2 for 11", g, r)
	}
	if a.Tails().Record != 16 || b.Tails().Record != 15 {
		t.Fatalf("tails a %d b %d, want 16 and 15", a.Tails().Record, b.Tails().Record)
	}
	for r := range results {
		recs, err := r.c.Read(r.first, 3, 0, 100)
		if err != nil || !equalData(dataOf(recs), payloads(r.tag, 0, 3)) {
			t.Fatalf("records of %s at %d: %v %q", r.tag, r.first, err, dataOf(recs))
		}
	}
}

func TestCursorEventsDurability(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil) // sync interval of an hour: only explicit syncs
	c := mustCreate(t, s, "c", 1)
	mustAppend(t, c, payloads("r", 0, 10))
	for i := range 5 {
		off, err := c.AppendCursor("reader", uint64(i+1))
		if err != nil || off != uint64(i) {
			t.Fatalf("cursor event %d at %d: %v", i, off, err)
		}
	}
	if _, err := c.AppendCursor("other", 11); err == nil {
		t.Fatal("cursor past the record tail accepted")
	}
	tl := c.Tails()
	if tl.CursorWritten != 5 || tl.CursorDurable != 0 {
		t.Fatalf("tails %+v, want 5 written, 0 durable", tl)
	}
	if p, ok := c.Cursor("reader"); !ok || p != 5 {
		t.Fatalf("cursor at %d %v, want 5", p, ok)
	}
	if err := c.SyncCursors(); err != nil {
		t.Fatal(err)
	}
	if tl := c.Tails(); tl.CursorDurable != 5 {
		t.Fatalf("after SyncCursors %+v", tl)
	}
	evs, err := c.ReadCursorEvents(1, 2, 100)
	if err != nil || len(evs) != 2 || evs[0] != (CursorEvent{Offset: 1, Cursor: "reader", Position: 2}) {
		t.Fatalf("read cursor events: %v %+v", err, evs)
	}
	if evs, _ := c.ReadCursorEvents(0, 0, 3); len(evs) != 3 {
		t.Fatalf("read cursor events below 3: %d", len(evs))
	}
	_ = s.Close()

	// The background loop makes events durable on its own.
	s2, err := openWith(Options{Dir: dir, Logger: quietLogger(), CursorSyncInterval: 5 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s2.Close(); err != nil {
			t.Error(err)
		}
	})
	c2 := s2.Get("c")
	if p, _ := c2.Cursor("reader"); p != 5 {
		t.Fatalf("cursor after reopen at %d", p)
	}
	if _, err := c2.AppendCursor("reader", 7); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c2, "cursor events durable", func() bool { return c2.Tails().CursorDurable == 6 })
}

func TestApplyCursorEventsRules(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "c", 1)
	ctx := context.Background()
	evs := []CursorEvent{{0, "a", 1}, {1, "b", 2}, {2, "a", 3}, {3, "b", 4}}
	if err := c.ApplyCursorEvents(ctx, evs[:2]); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyCursorEvents(ctx, evs[3:]); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{1, "b", 9}}); !errors.Is(err, ErrDiverged) {
		t.Fatalf("diverged: %v", err)
	}
	if err := c.ApplyCursorEvents(ctx, evs[1:]); err != nil {
		t.Fatal(err)
	}
	if tl := c.Tails(); tl.CursorWritten != 4 || tl.CursorDurable != 4 {
		t.Fatalf("tails %+v: applied events are durable", tl)
	}
	if p, _ := c.Cursor("a"); p != 3 {
		t.Fatalf("cursor a at %d", p)
	}
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	ctx := context.Background()
	c, err := s.Create("r", 1, wire.Retention{MaxRecords: 6})
	if err != nil {
		t.Fatal(err)
	}
	all := payloads("r", 0, 10) // 8 bytes each
	mustAppend(t, c, all)
	digest := c.Digest()
	// keepFrom holds the head back.
	if err := c.EnforceRetention(time.Now(), 2); err != nil {
		t.Fatal(err)
	}
	if h := c.Tails().Head; h != 2 {
		t.Fatalf("head %d, want 2 (held by keepFrom)", h)
	}
	if err := c.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if h := c.Tails().Head; h != 4 {
		t.Fatalf("head %d, want 4 by count", h)
	}
	if _, err := c.Read(3, 0, 0, 100); !errors.Is(err, ErrBelowHead) {
		t.Fatalf("read below head: %v", err)
	}
	if !equalData(dataOf(readAll(t, c)), all[4:]) {
		t.Fatal("retained records differ")
	}
	if c.Digest() != digest {
		t.Fatal("retention changed the digest")
	}
	// By bytes: at most 20 bytes = 2 records.
	if err := c.SetRetention(wire.Retention{MaxBytes: 20}); err != nil {
		t.Fatal(err)
	}
	if err := c.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if h := c.Tails().Head; h != 8 {
		t.Fatalf("head %d, want 8 by bytes", h)
	}
	// By age: records older than the cutoff go, newer stay.
	if err := c.SetRetention(wire.Retention{MaxAgeMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, c, payloads("n", 0, 2))
	if err := c.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if h := c.Tails().Head; h != 8 {
		t.Fatalf("head %d, want 8: nothing is a minute old", h)
	}
	if err := c.EnforceRetention(time.Now().Add(2*time.Minute), 11); err != nil {
		t.Fatal(err)
	}
	if h := c.Tails().Head; h != 11 {
		t.Fatalf("head %d, want 11 by age (held at keepFrom)", h)
	}
	// A follower applying from below the head skips what retention took.
	if err := c.Apply(ctx, []Record{{Offset: 10, Data: []byte("whatever")}, {Offset: 11, Data: []byte("n-000001")}, {Offset: 12, Data: []byte("z")}}); err != nil {
		t.Fatalf("apply across the head: %v", err)
	}
	digest = c.Digest()
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	c2 := s2.Get("r")
	if tl := c2.Tails(); tl.Head != 11 || tl.Record != 13 || c2.Digest() != digest {
		t.Fatalf("after reopen %+v digest %s want %s", tl, c2.Digest(), digest)
	}
	// Retention down to the tail leaves an empty log whose digest is kept.
	if err := c2.SetRetention(wire.Retention{MaxRecords: 0, MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c2.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if tl := c2.Tails(); tl.Head != 12 || c2.Digest() != digest {
		t.Fatalf("after byte retention %+v", tl)
	}
}

func TestOpenClampsCursors(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "c", 1)
	ctx := context.Background()
	mustAppend(t, c, payloads("r", 0, 3))
	// A follower can hold cursor events past its record tail.
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{0, "a", 2}, {1, "b", 9}, {2, "c", 5}}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	c2 := s2.Get("c")
	for name, want := range map[string]uint64{"a": 2, "b": 3, "c": 3} {
		if p, ok := c2.Cursor(name); !ok || p != want {
			t.Fatalf("cursor %s at %d after open, want %d", name, p, want)
		}
	}
	// The clamp is persisted: growing the log does not bring 9 back.
	mustAppend(t, c2, payloads("r", 3, 10))
	_ = s2.Close()
	s3 := openTest(t, dir, nil)
	if p, _ := s3.Get("c").Cursor("b"); p != 3 {
		t.Fatalf("cursor b at %d after the log grew, want the clamp 3", p)
	}
}

func TestCursorSnapshotReplay(t *testing.T) {
	dir := t.TempDir()
	small := func(s *impl) { s.snapEvery = 4 }
	s := openTest(t, dir, small)
	c := mustCreate(t, s, "c", 1)
	mustAppend(t, c, payloads("r", 0, 100))
	want := map[string]uint64{}
	for i := range 11 {
		name := fmt.Sprint("k", i%3)
		if _, err := c.AppendCursor(name, uint64(i*5)); err != nil {
			t.Fatal(err)
		}
		want[name] = uint64(i * 5)
	}
	if tl := c.Tails(); tl.CursorHead != 8 {
		t.Fatalf("snapshot boundary %d, want 8", tl.CursorHead)
	}
	_ = s.Close()
	s2 := openTest(t, dir, small)
	c2 := s2.Get("c")
	got := c2.cursorsSnapshot()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fold after reopen %v, want %v", got, want)
	}
	if tl := c2.Tails(); tl.CursorHead != 8 || tl.CursorWritten != 11 {
		t.Fatalf("tails after reopen %+v", tl)
	}
}

func TestDeleteRemovesAllKeys(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, func(s *impl) { s.snapEvery = 2 })
	ctx := context.Background()
	keep := mustCreate(t, s, "keep", 1)
	gone := mustCreate(t, s, "gone", 2)
	for _, c := range []*Copy{keep, gone} {
		mustAppend(t, c, payloads("r", 0, 20))
		for i := range 5 {
			if _, err := c.AppendCursor("x", uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.BeginEpoch(2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gone.Seal(3, 1); err != nil {
		t.Fatal(err)
	}
	goneID := gone.id
	if err := s.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Append(ctx, payloads("x", 0, 1)); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append to a deleted copy: %v", err)
	}
	if s.Get("gone") != nil {
		t.Fatal("deleted copy still listed")
	}
	countKeys := func(db *pebble.DB) (copyKeys, nameKeys, keepKeys int) {
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			switch {
			case bytes.HasPrefix(k, copyPrefix(goneID)):
				copyKeys++
			case bytes.Equal(k, nameKey("gone")):
				nameKeys++
			case bytes.HasPrefix(k, copyPrefix(keep.id)):
				keepKeys++
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if ck, nk, kk := countKeys(s.db); ck != 0 || nk != 0 || kk < 1+5+2 { // a batch of 20 records, 5 events, meta and snapshot
		t.Fatalf("after delete: %d keys of the deleted copy, %d name keys, %d keys of the kept copy", ck, nk, kk)
	}
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	if ck, nk, _ := countKeys(s2.db); ck != 0 || nk != 0 {
		t.Fatalf("after reopen: %d keys of the deleted copy, %d name keys", ck, nk)
	}
	if s2.Get("gone") != nil {
		t.Fatal("deleted copy back after reopen")
	}
	// Recreating gives a fresh copy with a new id.
	c := mustCreate(t, s2, "gone", 5)
	if c.id == goneID || c.Tails().Record != 0 || c.Epoch() != 0 {
		t.Fatalf("recreated copy id %d tails %+v epoch %d", c.id, c.Tails(), c.Epoch())
	}
	if !equalData(dataOf(readAll(t, s2.Get("keep"))), payloads("r", 0, 20)) {
		t.Fatal("kept copy damaged")
	}
}

func TestResetTo(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	c := mustCreate(t, s, "f", 1)
	ctx := context.Background()
	mustAppend(t, c, payloads("r", 0, 5))
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{0, "a", 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetTo(100, 40); err != nil {
		t.Fatal(err)
	}
	tl := c.Tails()
	if tl.Head != 100 || tl.Record != 100 || tl.CursorWritten != 40 || tl.CursorHead != 40 {
		t.Fatalf("tails after reset %+v", tl)
	}
	if _, ok := c.Cursor("a"); ok {
		t.Fatal("cursor kept across reset")
	}
	if err := c.Apply(ctx, []Record{{Offset: 101, Data: []byte("x")}}); !errors.Is(err, ErrGap) {
		t.Fatalf("apply past the reset tail: %v", err)
	}
	owner := payloads("o", 100, 3)
	if err := c.Apply(ctx, []Record{{Offset: 100, Data: owner[0]}, {Offset: 101, Data: owner[1]}, {Offset: 102, Data: owner[2]}}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyCursorEvents(ctx, []CursorEvent{{40, "b", 101}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadCursorEvents(39, 0, 100); !errors.Is(err, ErrBelowHead) {
		t.Fatalf("read cursor events below the reset: %v", err)
	}
	want := refDigest(0, 100, owner)
	if c.Digest() != want {
		t.Fatalf("digest %s, want %s (restarted at 100)", c.Digest(), want)
	}
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	c2 := s2.Get("f")
	if tl := c2.Tails(); tl.Head != 100 || tl.Record != 103 || tl.CursorWritten != 41 || c2.Digest() != want {
		t.Fatalf("after reopen %+v %s", tl, c2.Digest())
	}
	if p, _ := c2.Cursor("b"); p != 101 {
		t.Fatalf("cursor b %d", p)
	}

	// Resetting the records only (the cursor log restarts where it ends)
	// keeps the cursor events and positions.
	if err := c2.ResetTo(200, 41); err != nil {
		t.Fatal(err)
	}
	if tl := c2.Tails(); tl.Head != 200 || tl.Record != 200 || tl.CursorWritten != 41 || tl.CursorHead != 40 {
		t.Fatalf("after a records-only reset %+v", tl)
	}
	if p, _ := c2.Cursor("b"); p != 101 {
		t.Fatalf("cursor b %d after a records-only reset", p)
	}
	if evs, err := c2.ReadCursorEvents(40, 0, 100); err != nil || len(evs) != 1 {
		t.Fatalf("cursor events after a records-only reset: %v %+v", err, evs)
	}
}

// TestResetToDigest: a follower reset with the owner's digest at the reset
// point keeps the owner's chain: after applying the same records both
// report the same digest, at the tail and at every offset in between,
// also after a reopen.
func TestResetToDigest(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	ctx := context.Background()
	owner := mustCreate(t, s, "o", 1)
	all := payloads("r", 0, 12)
	mustAppend(t, owner, all)
	if err := owner.SetRetention(wire.Retention{MaxRecords: 4}); err != nil {
		t.Fatal(err)
	}
	if err := owner.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	ot := owner.Tails()
	if ot.Head != 8 || ot.HeadDigest == 0 {
		t.Fatalf("owner tails %+v", ot)
	}
	hd, err := owner.DigestAt(ot.Head)
	if err != nil || hd != ot.HeadDigest {
		t.Fatalf("owner DigestAt(head) %x, %v; Tails says %x", hd, err, ot.HeadDigest)
	}

	f := mustCreate(t, s, "f", 1)
	mustAppend(t, f, payloads("old", 0, 2))
	if err := f.ResetToDigest(ot.Head, 0, hd); err != nil {
		t.Fatal(err)
	}
	if ft := f.Tails(); ft.Head != 8 || ft.Record != 8 || ft.HeadDigest != hd || ft.RecordDigest != hd {
		t.Fatalf("follower tails after the reset %+v, want head and tail 8 with digest %x", ft, hd)
	}
	var recs []Record
	for i := 8; i < 12; i++ {
		recs = append(recs, Record{Offset: uint64(i), Data: all[i]})
	}
	if err := f.Apply(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if f.Digest() != owner.Digest() || f.Digest() != refDigest(0, 0, all) {
		t.Fatalf("follower digest %s, owner %s", f.Digest(), owner.Digest())
	}
	for off := uint64(8); off <= 12; off++ {
		od, err1 := owner.DigestAt(off)
		fd, err2 := f.DigestAt(off)
		if err1 != nil || err2 != nil || od != fd {
			t.Fatalf("DigestAt(%d): owner %x %v, follower %x %v", off, od, err1, fd, err2)
		}
	}
	_ = s.Close()
	s2 := openTest(t, dir, nil)
	if got := s2.Get("f"); got.Digest() != refDigest(0, 0, all) || got.Tails().HeadDigest != hd {
		t.Fatalf("after reopen: digest %s, tails %+v", got.Digest(), got.Tails())
	}
}

// TestDigestAt: the digest below any held offset, the head's and the
// tail's, and the errors around them.
func TestDigestAt(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "d", 1)
	if d, err := c.DigestAt(0); err != nil || d != 0 {
		t.Fatalf("DigestAt(0) of an empty copy: %x %v", d, err)
	}
	all := payloads("r", 0, 10)
	mustAppend(t, c, all)
	for off := 0; off <= 10; off++ {
		d, err := c.DigestAt(uint64(off))
		if err != nil || formatDigest(d) != refDigest(0, 0, all[:off]) {
			t.Fatalf("DigestAt(%d) = %x, %v; want %s", off, d, err, refDigest(0, 0, all[:off]))
		}
	}
	if tl := c.Tails(); formatDigest(tl.RecordDigest) != c.Digest() {
		t.Fatalf("Tails().RecordDigest %x, Digest %s", tl.RecordDigest, c.Digest())
	}
	if _, err := c.DigestAt(11); err == nil {
		t.Fatal("DigestAt past the tail succeeded")
	}
	if err := c.SetRetention(wire.Retention{MaxRecords: 6}); err != nil {
		t.Fatal(err)
	}
	if err := c.EnforceRetention(time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DigestAt(3); !errors.Is(err, ErrBelowHead) {
		t.Fatalf("DigestAt below the head: %v, want ErrBelowHead", err)
	}
	if d, err := c.DigestAt(4); err != nil || formatDigest(d) != refDigest(0, 0, all[:4]) {
		t.Fatalf("DigestAt(head) = %x, %v", d, err)
	}
}

// TestDigestAtThePreviousTail: the digest at the durable tail before the
// last write (a follower one write behind asks for it with every
// replication request) is answered from memory and right, and after a
// cut and new records it is the kept history's.
func TestDigestAtThePreviousTail(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreateAtEpoch1(t, s, "p", 1)
	all := payloads("r", 0, 8)
	for i := range all {
		mustAppend(t, c, all[i:i+1])
		if i == 0 {
			continue
		}
		// The record below the previous tail is gone from the database:
		// only memory can answer.
		key := batchKey(c.id, uint64(i-1)) // each append is a batch of its own
		v, closer, err := s.db.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		kept := slices.Clone(v)
		_ = closer.Close()
		if err := s.db.Delete(key, nil); err != nil {
			t.Fatal(err)
		}
		d, err := c.DigestAt(uint64(i))
		if err != nil || formatDigest(d) != refDigest(0, 0, all[:i]) {
			t.Fatalf("DigestAt(%d), the previous tail: %x %v; want %s from memory", i, d, err, refDigest(0, 0, all[:i]))
		}
		if err := s.db.Set(key, kept, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A cut to 6 and two new records in one group commit: the previous
	// tail is 6 again, with the digest of the history kept.
	starts := []wire.HistoryStart{{Epoch: 1, Node: "n1"}, {Epoch: 2, RecordTail: 6, Node: "n2"}}
	if _, err := c.CutToHistory(2, starts); err != nil {
		t.Fatal(err)
	}
	if err := c.BeginEpoch(2); err != nil {
		t.Fatal(err)
	}
	again := append(slices.Clone(all[:6]), payloads("new", 6, 2)...)
	mustAppend(t, c, again[6:])
	for off := 6; off <= 8; off++ {
		d, err := c.DigestAt(uint64(off))
		if err != nil || formatDigest(d) != refDigest(0, 0, again[:off]) {
			t.Fatalf("after the cut, DigestAt(%d) = %x, %v; want %s", off, d, err, refDigest(0, 0, again[:off]))
		}
	}
}

func TestChangedAndContextCancel(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	c := mustCreate(t, s, "c", 1)
	ch := c.Changed()
	select {
	case <-ch:
		t.Fatal("changed before any change")
	default:
	}
	mustAppend(t, c, payloads("r", 0, 1))
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by an append")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A cancelled caller waiting at an exclusive operation's gate gives up.
	c.mu.Lock()
	gate := make(chan struct{})
	c.gate = gate
	c.mu.Unlock()
	if _, err := c.Append(ctx, payloads("r", 1, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with a cancelled context at a closed gate: %v", err)
	}
	c.mu.Lock()
	c.gate = nil
	close(gate)
	c.mu.Unlock()
}
