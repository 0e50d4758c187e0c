package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// memTarget is an in-memory log for testing the workload and the verdict,
// with switches to make it lose, move or duplicate records.
type memTarget struct {
	mu       sync.Mutex
	log      [][]byte
	lose     bool // drop every 10th confirmed record from the log
	dup      bool // write every 7th record twice
	downFor  time.Duration
	n        int
	killedAt time.Time
}

func (m *memTarget) Name() string { return "mem" }

func (m *memTarget) Publish(ctx context.Context, data []byte) (uint64, error) {
	time.Sleep(200 * time.Microsecond) // keep the log small enough to judge quickly
	for {
		m.mu.Lock()
		if !m.killedAt.IsZero() && time.Since(m.killedAt) < m.downFor {
			m.mu.Unlock()
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(5 * time.Millisecond):
				continue
			}
		}
		m.n++
		off := uint64(len(m.log))
		if m.lose && m.n%10 == 0 {
			m.mu.Unlock()
			return off + 1_000_000, nil // confirmed, but never stored
		}
		m.log = append(m.log, append([]byte(nil), data...))
		if m.dup && m.n%7 == 0 {
			m.log = append(m.log, append([]byte(nil), data...))
		}
		m.mu.Unlock()
		return off, nil
	}
}

func (m *memTarget) Kill(context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.killedAt = time.Now()
	return "mem-1", nil
}

func (m *memTarget) Follow(ctx context.Context, fn func(uint64, []byte)) error {
	var next uint64
	for ctx.Err() == nil {
		m.mu.Lock()
		for ; next < uint64(len(m.log)); next++ {
			fn(next, m.log[next])
		}
		m.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

func (m *memTarget) ReadAll(ctx context.Context, fn func(uint64, []byte)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, d := range m.log {
		fn(uint64(i), d)
	}
	return nil
}

func (m *memTarget) After(context.Context) map[string]any { return map[string]any{"note": "in memory"} }

func run(t *testing.T, m *memTarget, kill bool) *Result {
	t.Helper()
	r, err := Run(context.Background(), m, Config{
		Duration: 400 * time.Millisecond, RecordSize: 64, Publishers: 2, Window: 4,
		Kill: kill, KillAt: 150 * time.Millisecond, FollowReaders: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCleanRunVerifies(t *testing.T) {
	r := run(t, &memTarget{downFor: 60 * time.Millisecond}, true)
	if !r.Verify.OK || r.Confirmed == 0 {
		t.Fatalf("clean run judged %+v with %d confirmed", r.Verify, r.Confirmed)
	}
	if r.UnavailableMS < 50 || r.UnavailableMS > 300 {
		t.Errorf("unavailability %d ms, want about 60", r.UnavailableMS)
	}
	if r.Before.Records == 0 || r.AfterKill.Records == 0 {
		t.Errorf("phases empty: before %+v after %+v", r.Before, r.AfterKill)
	}
	var text, js, svg bytes.Buffer
	if err := errors.Join(r.WriteText(&text), r.WriteJSON(&js), r.WriteSVG(&svg)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "verification OK") || !strings.Contains(js.String(), `"lost_confirmed": 0`) || !strings.Contains(svg.String(), "kill mem-1") {
		t.Errorf("reports miss the verdict:\n%s\n%s", text.String(), svg.String()[:200])
	}
}

func TestLostAndDuplicatedRecordsFail(t *testing.T) {
	if r := run(t, &memTarget{lose: true}, false); r.Verify.OK || r.Verify.Lost == 0 {
		t.Errorf("lost records not caught: %+v", r.Verify)
	}
	if r := run(t, &memTarget{dup: true}, false); r.Verify.OK || r.Verify.Duplicates == 0 {
		t.Errorf("duplicates not caught: %+v", r.Verify)
	}
}

func TestEncodeRecordPadding(t *testing.T) {
	for _, size := range []int{0, 5, idLen, 13, 256, 300, 1000} {
		b := encodeRecord(recordID{pub: 7, seq: 9}, size)
		if len(b) != max(size, idLen) {
			t.Fatalf("size %d: len %d", size, len(b))
		}
		for i := idLen; i < len(b); i++ {
			if b[i] != byte(i) {
				t.Fatalf("size %d: byte %d is %d", size, i, b[i])
			}
		}
		if id, ok := decodeRecord(b); !ok || id != (recordID{pub: 7, seq: 9}) {
			t.Fatalf("size %d: decoded %v %v", size, id, ok)
		}
	}
}

func TestOffsetLog(t *testing.T) {
	var l offsetLog
	a, b := recordID{pub: 1, seq: 1}, recordID{pub: 2, seq: 2}
	l.add(3, a)
	l.add(0, b)
	l.add(3, a) // the same record again: not a duplicate
	if l.dup != 0 {
		t.Fatalf("dup %d after repeats of the same record", l.dup)
	}
	l.add(3, b) // another record at a seen offset
	far := uint64(len(l.ids)) + maxOffsetGap + 5
	l.add(far, a)
	l.add(far, b)
	if l.dup != 2 {
		t.Fatalf("dup %d, want 2", l.dup)
	}
	if len(l.ids) > 16 {
		t.Fatalf("a far offset grew the slice to %d", len(l.ids))
	}
	got := map[uint64]recordID{}
	l.each(func(off uint64, id recordID) { got[off] = id })
	want := map[uint64]recordID{0: b, 3: b, far: b}
	if len(got) != len(want) {
		t.Fatalf("each gave %v, want %v", got, want)
	}
	for off, id := range want {
		if got[off] != id {
			t.Fatalf("each gave %v, want %v", got, want)
		}
	}
}

// An offset first kept in the map is found there once the slice grows
// over it: a different record at it later is a duplicate, and each visits
// it once.
func TestOffsetLogSliceGrowsOverTheMap(t *testing.T) {
	var l offsetLog
	a, b := recordID{pub: 1, seq: 1}, recordID{pub: 2, seq: 2}
	far := uint64(maxOffsetGap + 10)
	l.add(far, a)
	for off := uint64(0); off < far; off++ {
		l.add(off, recordID{pub: 3, seq: off})
	}
	l.add(far, b)
	if l.dup != 1 {
		t.Fatalf("dup %d, want 1 (another record where the map had one)", l.dup)
	}
	visits := 0
	l.each(func(off uint64, id recordID) {
		if off == far {
			visits++
			if id != b {
				t.Fatalf("offset %d: %v, want the last record seen there", off, id)
			}
		}
	})
	if visits != 1 {
		t.Fatalf("each visited offset %d %d times, want once", far, visits)
	}
}
