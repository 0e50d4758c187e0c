package streamlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/brook-streams/brook/pkg/wire"
)

// histModel is the cluster's truth in the property test: the owner history
// of every epoch (records and cursor events) and the recorded starts. The
// copy under test follows one of those histories at a time.
type histModel struct {
	t   *rapid.T
	dir string
	s   *Store
	c   *Copy

	recs   map[uint64][][]byte      // epoch -> the owner's record log
	evs    map[uint64][]CursorEvent // epoch -> the owner's cursor event log
	starts []wire.HistoryStart
	cur    uint64 // the latest epoch

	own     uint64 // the history the copy follows
	owner   bool   // the copy owns epoch own (it may not know it lost it)
	sealed  bool
	counter int
}

func (m *histModel) fresh() []byte {
	m.counter++
	return fmt.Appendf(nil, "rec-%d", m.counter)
}

func (m *histModel) open() {
	s, err := openWith(Options{Dir: m.dir, Logger: quietLogger(), CursorSyncInterval: time.Hour}, func(s *impl) { s.snapEvery = 3 })
	if err != nil {
		m.t.Fatalf("open: %v", err)
	}
	m.s = s
	m.c = s.Get("p")
}

func (m *histModel) copyLog() ([][]byte, []CursorEvent) {
	tl := m.c.Tails()
	var recs [][]byte
	for from := tl.Head; from < tl.Record; {
		rs, err := m.c.Read(from, 0, 0, tl.Record)
		if err != nil || len(rs) == 0 {
			m.t.Fatalf("read from %d: %v", from, err)
		}
		recs = append(recs, dataOf(rs)...)
		from = rs[len(rs)-1].Offset + 1
	}
	evs, err := m.c.ReadCursorEvents(0, 0, tl.CursorWritten)
	if err != nil {
		m.t.Fatalf("read cursor events: %v", err)
	}
	return recs, evs
}

// check is the invariant: the copy's logs are prefixes of the history it
// follows, and its digest is that prefix's.
func (m *histModel) check() {
	recs, evs := m.copyLog()
	h, he := m.recs[m.own], m.evs[m.own]
	if len(recs) > len(h) || !equalData(recs, h[:len(recs)]) {
		m.t.Fatalf("record log (%d) is not a prefix of epoch %d's history (%d)", len(recs), m.own, len(h))
	}
	if len(evs) > len(he) || !slices.Equal(evs, he[:len(evs)]) {
		m.t.Fatalf("cursor event log (%d) is not a prefix of epoch %d's history (%d)", len(evs), m.own, len(he))
	}
	if m.owner && !m.sealed && len(recs) != len(h) {
		m.t.Fatalf("owner copy holds %d records of its own history's %d", len(recs), len(h))
	}
	if d := refDigest(0, 0, recs); m.c.Digest() != d {
		m.t.Fatalf("digest %s, want %s", m.c.Digest(), d)
	}
	if m.c.Epoch() != m.own {
		m.t.Fatalf("copy epoch %d, model %d", m.c.Epoch(), m.own)
	}
}

func (m *histModel) lastStart() wire.HistoryStart { return m.starts[len(m.starts)-1] }

func (m *histModel) appendOwn(t *rapid.T) {
	if !m.owner {
		t.Skip("the copy is not an owner")
	}
	n := rapid.IntRange(1, 4).Draw(t, "n")
	data := make([][]byte, n)
	for i := range data {
		data[i] = m.fresh()
	}
	first, err := m.c.Append(context.Background(), data)
	if m.sealed {
		if !errors.Is(err, ErrSealed) {
			t.Fatalf("append to a sealed copy: %v", err)
		}
		return
	}
	if err != nil || first != uint64(len(m.recs[m.own])) {
		t.Fatalf("append: %v at %d", err, first)
	}
	m.recs[m.own] = append(m.recs[m.own], data...)
	if rapid.Bool().Draw(t, "cursor") {
		pos := rapid.Uint64Range(0, uint64(len(m.recs[m.own]))).Draw(t, "pos")
		name := rapid.SampledFrom([]string{"x", "y"}).Draw(t, "name")
		off, err := m.c.AppendCursor(name, pos)
		if err != nil || off != uint64(len(m.evs[m.own])) {
			t.Fatalf("cursor event: %v at %d", err, off)
		}
		m.evs[m.own] = append(m.evs[m.own], CursorEvent{Offset: off, Cursor: name, Position: pos})
	}
}

// appendOther is the current owner, another node, writing.
func (m *histModel) appendOther(t *rapid.T) {
	if m.owner && m.own == m.cur {
		t.Skip("the copy owns the current epoch")
	}
	for range rapid.IntRange(1, 4).Draw(t, "n") {
		m.recs[m.cur] = append(m.recs[m.cur], m.fresh())
	}
	if rapid.Bool().Draw(t, "cursor") {
		e := m.evs[m.cur]
		pos := rapid.Uint64Range(0, uint64(len(m.recs[m.cur]))).Draw(t, "pos")
		m.evs[m.cur] = append(e, CursorEvent{Offset: uint64(len(e)), Cursor: "x", Position: pos})
	}
}

// newEpoch moves the stream to another node at the next epoch, promoted
// at a tail between the latest start and the old owner's log end; the
// copy may be among the sealed copies.
func (m *histModel) newEpoch(t *rapid.T) {
	ls := m.lastStart()
	old, oldEvs := m.recs[m.cur], m.evs[m.cur]
	if uint64(len(old)) < ls.RecordTail {
		t.Skip("history shorter than its start")
	}
	next := m.cur + 1
	if rapid.Bool().Draw(t, "seal copy") {
		m.seal(t, next)
	}
	rt := rapid.Uint64Range(ls.RecordTail, uint64(len(old))).Draw(t, "record tail")
	// The promoted copy's record tail is at least the latest start (the
	// confirmed-prefix check), but its cursor event tail may be anywhere:
	// cursor events are not part of the choice beyond a tie-break, so a
	// promoted copy can hold fewer than an earlier start did.
	ct := rapid.Uint64Range(0, uint64(len(oldEvs))).Draw(t, "cursor tail")
	m.cur = next
	m.recs[next] = slices.Clone(old[:rt])
	m.evs[next] = slices.Clone(oldEvs[:ct])
	m.starts = append(m.starts, wire.HistoryStart{Epoch: next, RecordTail: rt, CursorTail: ct, Node: "other"})
}

func (m *histModel) seal(t *rapid.T, fence uint64) {
	before := m.c.Tails()
	st, err := m.c.Seal(fence, uint64(m.counter))
	if err != nil {
		t.Fatalf("seal at %d: %v", fence, err)
	}
	if st.Tails.Record != before.Record || st.Tails.CursorDurable != before.CursorWritten || st.Digest != m.c.Digest() {
		t.Fatalf("seal state %+v, tails before %+v", st, before)
	}
	m.sealed = true
}

// promoteCopy makes the copy the owner of the next epoch at its own tails.
func (m *histModel) promoteCopy(t *rapid.T) {
	tl := m.c.Tails()
	ls := m.lastStart()
	if m.own != m.cur || tl.Record < ls.RecordTail || tl.CursorWritten < ls.CursorTail {
		t.Skip("the copy cannot be promoted")
	}
	next := m.cur + 1
	m.seal(t, next)
	recs, evs := m.copyLog()
	m.cur = next
	m.recs[next], m.evs[next] = recs, evs
	m.starts = append(m.starts, wire.HistoryStart{Epoch: next, RecordTail: tl.Record, CursorTail: tl.CursorWritten, Node: "copy"})
	res, err := m.c.CutToHistory(next, m.starts)
	if err != nil || res.Cut {
		t.Fatalf("the promoted copy was cut: %v %+v", err, res)
	}
	if err := m.c.BeginEpoch(next); err != nil {
		t.Fatal(err)
	}
	m.own, m.owner, m.sealed = next, true, false
}

// rejoin brings the copy onto the current history as a follower: cut,
// begin the epoch, then catch up a little.
func (m *histModel) rejoin(t *rapid.T) {
	if m.own == m.cur {
		t.Skip("already on the current history")
	}
	beforeRecs, beforeEvs := m.copyLog()
	res, err := m.c.CutToHistory(m.cur, m.starts)
	if err != nil {
		t.Fatalf("cut: %v", err)
	}
	// Over the starts after the copy's own epoch, up to the target, the
	// record log is cut at the lowest record tail and the cursor event log
	// at the lowest cursor tail, each on its own; nothing below those is
	// removed.
	want := CutResult{RecordTail: uint64(len(beforeRecs)), CursorTail: uint64(len(beforeEvs))}
	var chosen []wire.HistoryStart
	for _, st := range m.starts {
		if st.Epoch > m.own && st.Epoch <= m.cur {
			chosen = append(chosen, st)
			want.RecordTail = min(want.RecordTail, st.RecordTail)
			want.CursorTail = min(want.CursorTail, st.CursorTail)
		}
	}
	if res.RecordTail != want.RecordTail || res.CursorTail != want.CursorTail {
		t.Fatalf("cut to %d/%d, want %d/%d (starts %+v)", res.RecordTail, res.CursorTail, want.RecordTail, want.CursorTail, chosen)
	}
	afterRecs, afterEvs := m.copyLog()
	if !equalData(afterRecs, beforeRecs[:len(afterRecs)]) || !slices.Equal(afterEvs, beforeEvs[:len(afterEvs)]) {
		t.Fatal("the cut changed entries it kept")
	}
	h, he := m.recs[m.cur], m.evs[m.cur]
	if len(afterRecs) > len(h) || !equalData(afterRecs, h[:len(afterRecs)]) || len(afterEvs) > len(he) || !slices.Equal(afterEvs, he[:len(afterEvs)]) {
		t.Fatalf("after the cut the copy (%d records, %d events) is not a prefix of epoch %d's history", len(afterRecs), len(afterEvs), m.cur)
	}
	for name, pos := range m.c.cursorsSnapshot() {
		if pos > res.RecordTail {
			t.Fatalf("cursor %s at %d above the tail %d after the cut", name, pos, res.RecordTail)
		}
	}
	tails := m.c.Tails()
	again, err := m.c.CutToHistory(m.cur, m.starts)
	if err != nil || again.Cut || m.c.Tails() != tails {
		t.Fatalf("repeating the cut: %v %+v, tails %+v then %+v", err, again, tails, m.c.Tails())
	}
	if err := m.c.BeginEpoch(m.cur); err != nil {
		t.Fatalf("begin epoch %d: %v", m.cur, err)
	}
	m.own, m.owner, m.sealed = m.cur, false, false
	m.catchUp(t)
}

func (m *histModel) catchUp(t *rapid.T) {
	if m.owner || m.own != m.cur || m.sealed {
		t.Skip("not a current follower")
	}
	tl := m.c.Tails()
	h, he := m.recs[m.cur], m.evs[m.cur]
	n := rapid.IntRange(0, 6).Draw(t, "records")
	// Resend a little of what is held too: identical overlaps are skipped.
	from := tl.Record - min(tl.Record, uint64(rapid.IntRange(0, 2).Draw(t, "overlap")))
	var recs []Record
	for o := from; o < min(uint64(len(h)), tl.Record+uint64(n)); o++ {
		recs = append(recs, Record{Offset: o, Data: h[o]})
	}
	if err := m.c.Apply(context.Background(), recs); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if end := min(uint64(len(he)), tl.CursorWritten+uint64(n)); end > tl.CursorWritten {
		if err := m.c.ApplyCursorEvents(context.Background(), he[tl.CursorWritten:end]); err != nil {
			t.Fatalf("apply cursor events: %v", err)
		}
	}
}

func (m *histModel) reopen(t *rapid.T) {
	tl, d := m.c.Tails(), m.c.Digest()
	if err := m.s.Close(); err != nil {
		t.Fatal(err)
	}
	m.open()
	got := m.c.Tails()
	if got.Record != tl.Record || got.CursorWritten != tl.CursorWritten || m.c.Digest() != d {
		t.Fatalf("reopen: tails %+v digest %s, before %+v %s", got, m.c.Digest(), tl, d)
	}
}

// TestPropertyHistories runs random sequences of appends (by the copy as
// owner, possibly after it lost ownership, and by other owners), epoch
// changes with and without sealing the copy, promotions of the copy,
// rejoins (cut + begin epoch + catch up) and reopens. After every step the
// copy's logs are a prefix of the owner history it follows; every cut
// keeps everything below the starts' tails, is a prefix of the target
// history, and repeating it changes nothing.
func TestPropertyHistories(t *testing.T) {
	root := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp(root, "prop")
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Error(err)
			}
		}()
		m := &histModel{t: t, dir: dir, recs: map[uint64][][]byte{}, evs: map[uint64][]CursorEvent{}}
		m.open()
		c, err := m.s.Create("p", 1, wire.Retention{})
		if err != nil {
			t.Fatal(err)
		}
		m.c = c
		defer func() { _ = m.s.Close() }()
		// Epoch 1 is owned by the copy from the start.
		if err := c.BeginEpoch(1); err != nil {
			t.Fatal(err)
		}
		m.cur, m.own, m.owner = 1, 1, true
		m.starts = []wire.HistoryStart{{Epoch: 1, Node: "copy"}}
		t.Repeat(map[string]func(*rapid.T){
			"appendOwn":   m.appendOwn,
			"appendOther": m.appendOther,
			"newEpoch":    m.newEpoch,
			"promoteCopy": m.promoteCopy,
			"rejoin":      m.rejoin,
			"catchUp":     m.catchUp,
			"reopen":      m.reopen,
			"":            func(*rapid.T) { m.check() },
		})
	})
}
