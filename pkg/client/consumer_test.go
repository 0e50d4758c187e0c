package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// memOwner is a test owner of one stream held in memory: records
// 0..len-1, durable cursors, and a log of the fetches it served.
type memOwner struct {
	t       *testing.T
	mu      sync.Mutex
	records [][]byte
	cursors map[string]uint64
	fetches []wire.FetchRequest
	commits []wire.CursorCommit
	// id, if set, is the stream's id: a request naming another id in
	// wire.HeaderStreamID is answered not_found, as by an owner of a
	// newer stream of the name. headers logs the header of every request.
	id      uint64
	headers []string
}

// refuse answers m with not_found if it names another stream id than o's,
// and logs the header it carried.
func (o *memOwner) refuse(m *nats.Msg) bool {
	h := m.Header.Get(wire.HeaderStreamID)
	o.mu.Lock()
	o.headers = append(o.headers, h)
	o.mu.Unlock()
	if h != "" && o.id != 0 && h != fmt.Sprint(o.id) {
		respondError(o.t, m, wire.Errorf(wire.CodeNotFound, "stream id %s was deleted", h))
		return true
	}
	return false
}

func newMemOwner(t *testing.T, nc *nats.Conn, stream string, n int) *memOwner {
	o := &memOwner{t: t, cursors: map[string]uint64{}}
	for i := range n {
		o.records = append(o.records, fmt.Appendf(nil, "r%d", i))
	}
	subscribe(t, nc, wire.FetchSubject(stream), o.fetch)
	subscribe(t, nc, wire.CommitSubject(stream), o.commit)
	return o
}

func (o *memOwner) fetch(m *nats.Msg) {
	if o.refuse(m) {
		return
	}
	var req wire.FetchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fetches = append(o.fetches, req)
	var from uint64
	switch {
	case req.Start == "offset":
		from = req.Offset
	case req.Cursor != "":
		from = o.cursors[req.Cursor]
	default:
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "no position"))
		return
	}
	tail := uint64(len(o.records))
	b := &frame.Batch{Epoch: 1, Tail: tail, Confirmed: tail, Next: from}
	for off := from; off < tail && (req.MaxRecords == 0 || len(b.Records) < req.MaxRecords); off++ {
		b.Records = append(b.Records, frame.Record{Offset: off, Data: o.records[off]})
		b.Next = off + 1
	}
	respondBatch(o.t, m, b)
}

func (o *memOwner) commit(m *nats.Msg) {
	if o.refuse(m) {
		return
	}
	var req wire.CursorCommit
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	o.mu.Lock()
	o.commits = append(o.commits, req)
	o.cursors[req.Cursor] = req.Offset
	ev := uint64(len(o.commits))
	o.mu.Unlock()
	respondJSON(o.t, m, wire.CursorCommitReply{Cursor: req.Cursor, Offset: req.Offset, EventOffset: ev})
}

func (o *memOwner) cursor(name string) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cursors[name]
}

// The consumer starts at the cursor's committed position, then fetches by
// its own offset, counts a record consumed when the next is asked for, and
// commits on Close; a new consumer of the cursor resumes after it.
func TestConsumerPositionAndCommitOnClose(t *testing.T) {
	url := startNATS(t)
	owner := newMemOwner(t, responderConn(t, url), "s", 10)
	owner.cursors["c"] = 3
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 10*time.Second)

	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "c", MaxRecords: 4, CommitInterval: -1, Wait: 10 * time.Millisecond, Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(3); want < 10; want++ {
		rec, err := cn.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if rec.Offset != want || string(rec.Data) != fmt.Sprintf("r%d", want) {
			t.Fatalf("record = %d %q, want %d r%d", rec.Offset, rec.Data, want, want)
		}
		// Everything before the record just returned is consumed.
		if got := cn.Position(); got != want {
			t.Fatalf("position after record %d = %d, want %d", want, got, want)
		}
	}
	if got := owner.cursor("c"); got != 3 {
		t.Fatalf("cursor committed early: %d", got)
	}
	if err := cn.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := owner.cursor("c"); got != 10 {
		t.Fatalf("cursor after close = %d, want 10", got)
	}
	if _, err := cn.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after close: %v, want ErrClosed", err)
	}

	owner.mu.Lock()
	fetches := append([]wire.FetchRequest(nil), owner.fetches...)
	owner.mu.Unlock()
	want := []wire.FetchRequest{
		{Cursor: "c", MaxRecords: 4, WaitMS: 10},
		{Start: "offset", Offset: 7, MaxRecords: 4, WaitMS: 10},
	}
	if len(fetches) != len(want) {
		t.Fatalf("fetches = %+v, want %+v", fetches, want)
	}
	for i := range want {
		if fetches[i] != want[i] {
			t.Fatalf("fetch %d = %+v, want %+v", i, fetches[i], want[i])
		}
	}

	// A new consumer of the same cursor resumes after everything consumed:
	// there is nothing more, so Next waits until its context ends.
	cn2, err := c.NewConsumer("s", ConsumerConfig{Cursor: "c", Wait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if rec, err := cn2.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resumed consumer got %+v, %v; want nothing until the deadline", rec, err)
	}
	if cn2.Position() != 10 {
		t.Fatalf("resumed at %d, want 10", cn2.Position())
	}
}

// With a commit interval, Next commits what was consumed so far; nothing is
// committed past the record the caller still holds.
func TestConsumerCommitsPeriodically(t *testing.T) {
	url := startNATS(t)
	owner := newMemOwner(t, responderConn(t, url), "s", 5)
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 10*time.Second)
	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "c", CommitInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := cn.Next(ctx); err != nil {
			t.Fatal(err)
		}
		// Record i is held by the caller; records below it are consumed
		// and were committed by this Next.
		if got := owner.cursor("c"); got != uint64(i) {
			t.Fatalf("after handing out record %d the cursor is %d, want %d", i, got, i)
		}
	}
	owner.mu.Lock()
	n := len(owner.commits)
	owner.mu.Unlock()
	if n != 4 {
		t.Fatalf("commits = %d, want 4 (none before the first record was consumed)", n)
	}
	if err := cn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := owner.cursor("c"); got != 5 {
		t.Fatalf("cursor after close = %d, want 5", got)
	}
}

// A record below the consumer's position is never handed out twice, and an
// error reply of a fetch is decoded.
func TestFetchErrorReply(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.FetchSubject("s"), func(m *nats.Msg) {
		respondError(t, m, wire.Errorf(wire.CodeBadRequest, "cursor or start required"))
	})
	c := connectClient(t, url)
	_, err := c.Fetch(ctxTimeout(t, 10*time.Second), "s", wire.FetchRequest{})
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Code != wire.CodeBadRequest || werr.Message != "cursor or start required" {
		t.Fatalf("err = %v, want bad_request", err)
	}
}

// A fetch reply that repeats records below the requested offset (as an
// owner might after a failover) does not make the consumer repeat them.
func TestConsumerSkipsRecordsBelowPosition(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var mu sync.Mutex
	calls := 0
	subscribe(t, svc, wire.FetchSubject("s"), func(m *nats.Msg) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		b := &frame.Batch{Records: []frame.Record{{Offset: 0, Data: []byte("a")}, {Offset: 1, Data: []byte("b")}}, Next: 2}
		if n > 1 {
			// Starts again one record early.
			b = &frame.Batch{Records: []frame.Record{{Offset: 1, Data: []byte("b")}, {Offset: 2, Data: []byte("c")}}, Next: 3}
		}
		respondBatch(t, m, b)
	})
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 10*time.Second)
	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "c", CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range 3 {
		rec, err := cn.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Offset)
	}
	if fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("offsets = %v, want [0 1 2]", got)
	}
}

// A consumer tied to a stream id sends it with every fetch and commit, and
// fails with not_found once the stream of that id is gone, rather than
// reading a new stream of the same name; without an id no header is sent.
func TestConsumerWithStreamID(t *testing.T) {
	url := startNATS(t)
	o := newMemOwner(t, responderConn(t, url), "s", 3)
	o.id = 7
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 10*time.Second)

	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "k", StreamID: 7, CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for want := range uint64(2) {
		if rec, err := cn.Next(ctx); err != nil || rec.Offset != want {
			t.Fatalf("next = %+v, %v; want offset %d", rec, err, want)
		}
	}
	if err := cn.Close(ctx); err != nil || o.cursor("k") != 2 {
		t.Fatalf("close = %v, cursor at %d; want 2", err, o.cursor("k"))
	}

	old, err := c.NewConsumer("s", ConsumerConfig{Cursor: "k", StreamID: 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Next(ctx); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("next on a deleted stream id = %v, want not_found", err)
	}
	if _, err := c.CommitCursor(ctx, "s", "k", 3, FromStreamID(6)); wire.CodeOf(err) != wire.CodeNotFound || o.cursor("k") != 2 {
		t.Fatalf("commit on a deleted stream id = %v, cursor at %d; want not_found and 2", err, o.cursor("k"))
	}
	if _, err := c.Fetch(ctx, "s", wire.FetchRequest{Start: "offset"}); err != nil {
		t.Fatal(err)
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	// One fetch (it returned all three records) and the commit of Close;
	// the old consumer's fetch and the commit; the fetch without an id.
	want := []string{"7", "7", "6", "6", ""}
	if fmt.Sprint(o.headers) != fmt.Sprint(want) {
		t.Fatalf("stream id headers %q, want %q", o.headers, want)
	}
}
