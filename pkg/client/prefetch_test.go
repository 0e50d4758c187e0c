package client

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// aheadOwner serves records 0..tail-1 of stream "s" with a watermark of
// confirmed, returning at most short(from) records for a fetch at from
// (as an owner whose byte bound ran out) and failing the first fetch at
// each offset in fail once; it logs every fetch.
type aheadOwner struct {
	t         *testing.T
	mu        sync.Mutex
	tail      uint64
	confirmed uint64
	short     func(from uint64) int // 0: no extra bound
	fail      map[uint64]bool
	fetches   []wire.FetchRequest
}

func (o *aheadOwner) serve(m *nats.Msg) {
	var req wire.FetchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "%v", err))
		return
	}
	o.mu.Lock()
	o.fetches = append(o.fetches, req)
	from := req.Offset
	fail := req.Start == "offset" && o.fail[from]
	delete(o.fail, from)
	b := &frame.Batch{Epoch: 1, Tail: o.tail, Confirmed: o.confirmed, Next: from}
	limit := req.MaxRecords
	if o.short != nil {
		if n := o.short(from); n > 0 {
			limit = min(limit, n)
		}
	}
	for off := from; off < o.confirmed && len(b.Records) < limit; off++ {
		b.Records = append(b.Records, frame.Record{Offset: off, Data: fmt.Appendf(nil, "r%d", off)})
		b.Next = off + 1
	}
	o.mu.Unlock()
	if fail {
		respondError(o.t, m, wire.Errorf(wire.CodeBadRequest, "refused once at %d", from))
		return
	}
	respondBatch(o.t, m, b)
}

func (o *aheadOwner) log() []wire.FetchRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]wire.FetchRequest(nil), o.fetches...)
}

// readAhead reads n records with a consumer of prefetch from o's stream
// and checks they are 0..n-1, once each, in order.
func readAhead(t *testing.T, o *aheadOwner, prefetch, maxRecords, n int) {
	t.Helper()
	url := startNATS(t)
	svc := responderConn(t, url)
	subscribe(t, svc, wire.FetchSubject("s"), o.serve)
	subscribe(t, svc, wire.CommitSubject("s"), func(m *nats.Msg) { respondJSON(t, m, wire.CursorCommitReply{Cursor: "k"}) })
	c := connectClient(t, url)
	ctx := ctxTimeout(t, 20*time.Second)
	cn, err := c.NewConsumer("s", ConsumerConfig{Cursor: "k", MaxRecords: maxRecords, Prefetch: prefetch, CommitInterval: -1, Wait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for want := range uint64(n) {
		rec, err := cn.Next(ctx)
		if err != nil {
			t.Fatalf("next at %d: %v", want, err)
		}
		if rec.Offset != want || string(rec.Data) != fmt.Sprintf("r%d", want) {
			t.Fatalf("record %d %q, want %d", rec.Offset, rec.Data, want)
		}
	}
	if err := cn.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// While the owner has confirmed more than a reply carries, the consumer
// keeps Prefetch-1 fetches by offset in flight, each asking for as many
// records as the last reply held and none long-polling, and never asks
// from at or past the watermark the replies named.
func TestConsumerFetchesAhead(t *testing.T) {
	o := &aheadOwner{t: t, tail: 120, confirmed: 100}
	readAhead(t, o, 4, 10, 100)
	fetches := o.log()
	if fetches[0].Cursor != "k" {
		t.Fatalf("first fetch %+v, want the cursor's", fetches[0])
	}
	asked := map[uint64]int{}
	for _, f := range fetches[1:] {
		if f.Start != "offset" || f.MaxRecords != 10 {
			t.Fatalf("fetch %+v: want by offset, 10 records", f)
		}
		asked[f.Offset]++
		if f.Offset >= 100 && f.WaitMS == 0 {
			t.Fatalf("fetch ahead %+v at or past the watermark 100", f)
		}
	}
	for off := uint64(10); off < 100; off += 10 {
		if asked[off] != 1 {
			t.Fatalf("offset %d asked %d times; fetches %+v", off, asked[off], fetches)
		}
	}
	if len(fetches) != 10 {
		t.Fatalf("%d fetches, want 10 (one per batch): %+v", len(fetches), fetches)
	}
}

// A reply shorter than asked (its bytes ran out first) leaves a gap before
// the next fetch ahead: the gap is asked for, the batch after it kept, and
// every record still arrives once, in order.
func TestConsumerFillsTheGapOfAShortReply(t *testing.T) {
	o := &aheadOwner{t: t, tail: 200, confirmed: 200, short: func(from uint64) int {
		if from%3 == 0 {
			return 7
		}
		return 0
	}}
	readAhead(t, o, 3, 10, 200)
}

// A fetch ahead that fails is dropped with the ones after it and the
// consumer goes on from its position; the error is not the caller's.
func TestConsumerDropsAFailedFetchAhead(t *testing.T) {
	o := &aheadOwner{t: t, tail: 100, confirmed: 100, fail: map[uint64]bool{30: true, 70: true}}
	readAhead(t, o, 4, 10, 100)
}

// Prefetch 1 fetches one batch at a time, as before.
func TestConsumerWithoutPrefetch(t *testing.T) {
	o := &aheadOwner{t: t, tail: 50, confirmed: 50}
	readAhead(t, o, 1, 10, 50)
	for i, f := range o.log()[1:] {
		if f.WaitMS != 10 || f.Offset != uint64(10*(i+1)) {
			t.Fatalf("fetch %d: %+v, want a plain fetch at %d", i+1, f, 10*(i+1))
		}
	}
}
