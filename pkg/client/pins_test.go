package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// incarnation stands in for the owner of one stream of a name: records,
// its id in every reply (as the host names it), and not_found to a
// request naming an older id. Unsubscribing it and starting another
// models stream.delete and stream.create of the same name.
type incarnation struct {
	t       *testing.T
	id      uint64
	records [][]byte
	subs    []*nats.Subscription

	mu      sync.Mutex
	headers []string // wire.HeaderStreamID of every request
	commits []uint64
}

func startIncarnation(t *testing.T, nc *nats.Conn, stream string, id uint64, n int) *incarnation {
	t.Helper()
	in := &incarnation{t: t, id: id}
	for i := range n {
		in.records = append(in.records, fmt.Appendf(nil, "id%d-r%d", id, i))
	}
	in.subs = append(in.subs,
		subscribe(t, nc, wire.PublishSubject(stream), in.onPublish),
		subscribe(t, nc, wire.FetchSubject(stream), in.onFetch),
		subscribe(t, nc, wire.CommitSubject(stream), in.onCommit))
	return in
}

func (in *incarnation) stop() {
	for _, s := range in.subs {
		_ = s.Unsubscribe()
	}
}

// refused logs the request's header and answers a request naming another
// id as the host does: not_found for an older id.
func (in *incarnation) refused(m *nats.Msg) bool {
	h := m.Header.Get(wire.HeaderStreamID)
	in.mu.Lock()
	in.headers = append(in.headers, h)
	in.mu.Unlock()
	if h != "" && h != fmt.Sprint(in.id) {
		respondError(in.t, m, wire.Errorf(wire.CodeNotFound, "stream id %s was deleted; the stream of that name is now id %d", h, in.id))
		return true
	}
	return false
}

func (in *incarnation) onPublish(m *nats.Msg) {
	if in.refused(m) {
		return
	}
	in.mu.Lock()
	in.records = append(in.records, m.Data)
	off := uint64(len(in.records) - 1)
	in.mu.Unlock()
	respondJSON(in.t, m, wire.PublishConfirm{StreamID: in.id, Offset: off, Epoch: 1, Copies: 1, W: 1})
}

func (in *incarnation) onFetch(m *nats.Msg) {
	if in.refused(m) {
		return
	}
	var req wire.FetchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respondError(in.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	in.mu.Lock()
	tail := uint64(len(in.records))
	from := req.Offset
	if req.Start != "offset" {
		from = 0
	}
	b := &frame.Batch{Epoch: 1, Tail: tail, Confirmed: tail, Next: from}
	for off := from; off < tail; off++ {
		b.Records = append(b.Records, frame.Record{Offset: off, Data: in.records[off]})
		b.Next = off + 1
	}
	in.mu.Unlock()
	r := nats.NewMsg(m.Reply)
	r.Header.Set(wire.HeaderStreamID, fmt.Sprint(in.id))
	r.Data = frame.AppendBatch(nil, b)
	if err := m.RespondMsg(r); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		in.t.Errorf("respond: %v", err)
	}
}

func (in *incarnation) onCommit(m *nats.Msg) {
	if in.refused(m) {
		return
	}
	var req wire.CursorCommit
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respondError(in.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	in.mu.Lock()
	in.commits = append(in.commits, req.Offset)
	in.mu.Unlock()
	respondJSON(in.t, m, wire.CursorCommitReply{Cursor: req.Cursor, Offset: req.Offset})
}

func (in *incarnation) seen() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.headers...)
}

// A consumer continuing by offset across a delete and a create of its
// stream's name gets ErrStreamReplaced, never the new stream's records as
// if they followed the old one's. Before pinning it read offsets 0..2 of
// id 1 and then 3.. of id 2 without an error.
func TestConsumerNeverCrossesIncarnations(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	old := startIncarnation(t, svc, "s", 1, 3)
	c := connectClient(t, url, WithRetry(0, 5*time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "k", CommitInterval: -1, Wait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for want := range uint64(3) {
		rec, err := cn.Next(ctx)
		if err != nil || string(rec.Data) != fmt.Sprintf("id1-r%d", want) {
			t.Fatalf("next = %q, %v; want id1-r%d", rec.Data, err, want)
		}
	}
	if got := c.PinnedStreamID("s"); got != 1 {
		t.Fatalf("pinned to %d after the first fetch, want 1", got)
	}
	old.stop()
	startIncarnation(t, svc, "s", 2, 6)
	rec, err := cn.Next(ctx)
	if err == nil {
		t.Fatalf("next after the stream was replaced returned %q at offset %d: a record of another stream", rec.Data, rec.Offset)
	}
	if !errors.Is(err, ErrStreamReplaced) || wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("next after the stream was replaced: %v, want ErrStreamReplaced with the host's not_found", err)
	}
	if err := cn.Close(ctx); !errors.Is(err, ErrStreamReplaced) {
		t.Fatalf("close: %v, want ErrStreamReplaced (the commit must not land in the new stream)", err)
	}

	// Unpinned, the client moves on to the stream that holds the name.
	c.Unpin("s")
	b, err := c.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest"})
	if err != nil || len(b.Records) != 6 || c.PinnedStreamID("s") != 2 {
		t.Fatalf("fetch after Unpin: %v (%d records), pinned %d; want id 2's 6 records", err, len(b.Records), c.PinnedStreamID("s"))
	}
}

// A publish is pinned by its first confirm: the next ones name the id, so
// after a delete and create of the name they fail with ErrStreamReplaced
// rather than land in the new stream. With pinning off they name nothing.
func TestPublishPinnedByFirstConfirm(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	old := startIncarnation(t, svc, "s", 5, 0)
	c := connectClient(t, url, WithRetry(0, 5*time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	if pc, err := c.Publish(ctx, "s", []byte("a")); err != nil || pc.StreamID != 5 {
		t.Fatalf("first publish: %+v, %v", pc, err)
	}
	if pc, err := c.Publish(ctx, "s", []byte("b")); err != nil || pc.StreamID != 5 {
		t.Fatalf("second publish: %+v, %v", pc, err)
	}
	if got := old.seen(); fmt.Sprint(got) != fmt.Sprint([]string{"", "5"}) {
		t.Fatalf("headers %q, want the first publish unpinned and the second naming 5", got)
	}
	old.stop()
	nw := startIncarnation(t, svc, "s", 6, 0)
	pc, err := c.Publish(ctx, "s", []byte("c"))
	if !errors.Is(err, ErrStreamReplaced) {
		t.Fatalf("publish after the stream was replaced: %+v, %v; want ErrStreamReplaced", pc, err)
	}
	nw.mu.Lock()
	n := len(nw.records)
	nw.mu.Unlock()
	if n != 0 {
		t.Fatalf("the new stream holds %d records of a client pinned to the old one", n)
	}

	// The async publisher names the pin too.
	p, err := c.NewAsyncPublisher("s", AsyncConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.PublishAsync(ctx, []byte("d"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Wait(ctx); !errors.Is(err, ErrStreamReplaced) {
		t.Fatalf("async publish after the stream was replaced: %v; want ErrStreamReplaced", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	free := connectClient(t, url, WithStreamPinning(false))
	for range 2 {
		if pc, err := free.Publish(ctx, "s", []byte("e")); err != nil || pc.StreamID != 6 {
			t.Fatalf("unpinned publish: %+v, %v", pc, err)
		}
	}
	if got := nw.seen(); got[len(got)-1] != "" || got[len(got)-2] != "" || free.PinnedStreamID("s") != 0 {
		t.Fatalf("headers %q, pin %d: a client without pinning named an id", got, free.PinnedStreamID("s"))
	}
}

// A pinned request that finds nobody serving asks the coordinators, and a
// stream of the name with another id ends the retries with
// ErrStreamReplaced instead of waiting for an owner that never returns.
func TestPinnedRetryStopsAtAnotherIncarnation(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var infos atomic.Int32
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		infos.Add(1)
		respondJSON(t, m, wire.StreamInfo{Stream: "s", StreamID: 9, Status: wire.StatusRecovering})
	})
	c := connectClient(t, url, WithRetry(0, 5*time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	c.setPin("s", 8)
	_, err := c.Fetch(ctx, "s", wire.FetchRequest{Start: "earliest"})
	if !errors.Is(err, ErrStreamReplaced) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("fetch pinned to a deleted stream: %v; want ErrStreamReplaced after no responders", err)
	}
	if infos.Load() != 1 {
		t.Fatalf("%d stream.info requests, want 1", infos.Load())
	}
	// CreateStream pins to the new stream, DeleteStream unpins.
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamCreate), func(m *nats.Msg) {
		respondJSON(t, m, wire.StreamInfo{Stream: "s", StreamID: 10, Status: wire.StatusServing})
	})
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamDelete), func(m *nats.Msg) { respondJSON(t, m, wire.OK{OK: true}) })
	if _, err := c.CreateStream(ctx, wire.StreamCreate{Stream: "s", Copies: 1}); err != nil || c.PinnedStreamID("s") != 10 {
		t.Fatalf("create: %v, pinned %d; want 10", err, c.PinnedStreamID("s"))
	}
	if _, err := c.DeleteStream(ctx, "s"); err != nil || c.PinnedStreamID("s") != 0 {
		t.Fatalf("delete: %v, pinned %d; want none", err, c.PinnedStreamID("s"))
	}
}
