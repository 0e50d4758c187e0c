package host

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// pubBatchTo sends a publish batch frame (body) on stream's batch subject
// and returns the decoded reply, or the error reply.
func pubBatchTo(t *testing.T, nc *nats.Conn, stream string, body []byte, timeout time.Duration) (*frame.PubReply, *nats.Msg, *wire.Error) {
	t.Helper()
	m := nats.NewMsg(wire.PublishBatchSubject(stream))
	m.Data = body
	resp, err := nc.RequestMsg(m, timeout)
	if err != nil {
		return nil, nil, &wire.Error{Code: "transport", Message: err.Error()}
	}
	if e := replyError(resp); e != nil {
		if resp.Header.Get(frame.HeaderError) != e.Code {
			t.Fatalf("error reply without its %s header: %+v", frame.HeaderError, resp.Header)
		}
		return nil, resp, e
	}
	r, err := frame.DecodePubReply(resp.Data)
	if err != nil {
		t.Fatalf("decode publish reply: %v", err)
	}
	return r, resp, nil
}

// recs builds records of producer (none if "") with sequences seqs, each
// payload naming its sequence.
func recs(producer string, seqs ...uint64) []frame.PubRecord {
	out := make([]frame.PubRecord, len(seqs))
	for i, s := range seqs {
		out[i] = frame.PubRecord{Producer: producer, Seq: s, Data: fmt.Appendf(nil, "%s-%d", producer, s)}
	}
	return out
}

// mustPubBatch publishes records as one batch and returns its reply.
func mustPubBatch(t *testing.T, nc *nats.Conn, stream string, records []frame.PubRecord) *frame.PubReply {
	t.Helper()
	r, _, e := pubBatchTo(t, nc, stream, frame.AppendPubBatch(nil, &frame.PubBatch{Records: records}), 10*time.Second)
	if e != nil {
		t.Fatalf("publish batch to %s: %v", stream, e)
	}
	if len(r.Results) != len(records) {
		t.Fatalf("%d results for %d records", len(r.Results), len(records))
	}
	return r
}

// wantResults checks a reply's results.
func wantResults(t *testing.T, r *frame.PubReply, want ...frame.PubResult) {
	t.Helper()
	for i, w := range want {
		if r.Results[i] != w {
			t.Fatalf("result %d: %+v, want %+v (all %+v)", i, r.Results[i], w, r.Results)
		}
	}
}

// A batch is confirmed with one reply only once W copies hold all of its
// records: with the followers down it waits; once one is up (W = 2 of 3)
// it is confirmed, every record at its own offset, in the order sent, and
// a fetch returns them.
func TestPublishBatchConfirmedByW(t *testing.T) {
	const stream = "pb"
	c := newMiniCluster(t)
	c.assign(assignment(stream, 1, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"}))
	c.start("n1", nil)
	c.waitCopy("n1", stream, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })

	records := append(recs("p", 1, 2, 3), recs("", 0, 0)...)
	type result struct {
		r    *frame.PubReply
		resp *nats.Msg
		e    *wire.Error
	}
	done := make(chan result, 1)
	go func() {
		r, resp, e := pubBatchTo(t, c.nc, stream, frame.AppendPubBatch(nil, &frame.PubBatch{Records: records}), 10*time.Second)
		done <- result{r, resp, e}
	}()
	select {
	case res := <-done:
		t.Fatalf("batch answered with one copy of the two needed: %+v %v", res.r, res.e)
	case <-time.After(300 * time.Millisecond):
	}
	c.start("n2", nil)
	res := <-done
	if res.e != nil {
		t.Fatalf("batch: %v", res.e)
	}
	if res.r.W != 2 || res.r.Copies < 2 {
		t.Fatalf("batch confirmed by %d copies, W %d; want at least 2, W 2", res.r.Copies, res.r.W)
	}
	wantResults(t, res.r, frame.PubResult{Offset: 0}, frame.PubResult{Offset: 1}, frame.PubResult{Offset: 2},
		frame.PubResult{Offset: 3}, frame.PubResult{Offset: 4})
	if id, ep := res.resp.Header.Get(wire.HeaderStreamID), res.resp.Header.Get(wire.HeaderEpoch); id != "1" || ep != "1" {
		t.Fatalf("reply headers stream id %q epoch %q, want 1 and 1", id, ep)
	}
	b := c.fetch(stream, wire.FetchRequest{Start: "earliest"})
	if len(b.Records) != len(records) {
		t.Fatalf("fetched %d records, want %d", len(b.Records), len(records))
	}
	for i, r := range b.Records {
		if !bytes.Equal(r.Data, records[i].Data) {
			t.Fatalf("record %d: %q, want %q", i, r.Data, records[i].Data)
		}
	}
	// A single publish is unchanged and follows the batch.
	if pc := c.mustPublish(stream, []byte("single")); pc.Offset != 5 {
		t.Fatalf("single publish after the batch at offset %d, want 5", pc.Offset)
	}
}

// Duplicate suppression is exact per record: a repeat within a batch,
// across batches and between batches and single publishes answers with the
// first write's offset and is not written again.
func TestPublishBatchDuplicates(t *testing.T) {
	const stream = "pbdup"
	f := newFixture(t)
	f.set(1, map[string]uint64{stream: 3}, one(stream, 3, 1, []wire.HistoryStart{}, ""))
	f.waitHB("owner", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, stream)
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	})
	// Within a batch: p/1 twice.
	r := mustPubBatch(t, f.nc, stream, recs("p", 1, 2, 1))
	wantResults(t, r, frame.PubResult{Offset: 0}, frame.PubResult{Offset: 1}, frame.PubResult{Offset: 0, Duplicate: true})
	// Across batches, with another producer's same sequence written.
	r = mustPubBatch(t, f.nc, stream, append(recs("p", 2, 3), recs("q", 1)...))
	wantResults(t, r, frame.PubResult{Offset: 1, Duplicate: true}, frame.PubResult{Offset: 2}, frame.PubResult{Offset: 3})
	// A single publish repeating a batch's record, and a batch repeating
	// a single publish's.
	single := func(seq uint64) wire.PublishConfirm {
		m := nats.NewMsg(wire.PublishSubject(stream))
		m.Data = []byte("single")
		m.Header.Set(wire.HeaderProducer, "p")
		m.Header.Set(wire.HeaderSequence, strconv.FormatUint(seq, 10))
		return f.mustConfirm(t, m)
	}
	if pc := single(3); !pc.Duplicate || pc.Offset != 2 {
		t.Fatalf("single repeat of a batch's record: %+v, want duplicate of offset 2", pc)
	}
	if pc := single(4); pc.Duplicate || pc.Offset != 4 {
		t.Fatalf("single p/4: %+v, want offset 4", pc)
	}
	r = mustPubBatch(t, f.nc, stream, recs("p", 4, 5))
	wantResults(t, r, frame.PubResult{Offset: 4, Duplicate: true}, frame.PubResult{Offset: 5})
	// A batch of repeats only is answered too, and nothing was written twice.
	r = mustPubBatch(t, f.nc, stream, recs("p", 5, 1))
	wantResults(t, r, frame.PubResult{Offset: 5, Duplicate: true}, frame.PubResult{Offset: 0, Duplicate: true})
	if pc := f.publishPlain(t, stream); pc.Offset != 6 {
		t.Fatalf("next record at offset %d, want 6: a repeat was written", pc.Offset)
	}
}

// Bad input gets coded errors and writes nothing: a frame that does not
// decode is bad_request, a batch over the record or byte limits is
// payload_too_large whole, a record over the host's MaxPayload is refused
// on its own (payload_too_large in its result) while the others are
// confirmed, and a batch naming another stream id is refused like a
// single publish.
func TestPublishBatchRefusals(t *testing.T) {
	const stream = "pbbad"
	f := newFixtureWith(t, fixtureOptions{maxPayload: 16 << 20})
	f.set(1, map[string]uint64{stream: 3}, one(stream, 3, 1, []wire.HistoryStart{}, ""))
	f.waitHB("owner", func(hb wire.Heartbeat) bool {
		cs, ok := find(hb, stream)
		return ok && cs.Role == wire.RoleOwner && f.host.Ready()
	})
	refused := func(what string, body []byte, code string) {
		t.Helper()
		if _, _, e := pubBatchTo(t, f.nc, stream, body, 10*time.Second); codeOf(e) != code {
			t.Fatalf("%s: %v, want %s", what, e, code)
		}
	}
	refused("garbage", []byte("not a frame"), wire.CodeBadRequest)
	refused("a replication request", frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "n1"}), wire.CodeBadRequest)
	refused("truncated", frame.AppendPubBatch(nil, &frame.PubBatch{Records: recs("p", 1)})[:5], wire.CodeBadRequest)
	many := make([]frame.PubRecord, wire.MaxPublishBatchRecords+1)
	refused("too many records", frame.AppendPubBatch(nil, &frame.PubBatch{Records: many}), wire.CodePayloadTooLarge)
	huge := frame.AppendPubBatch(nil, &frame.PubBatch{Records: []frame.PubRecord{
		{Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, DefaultMaxPayload)},
		{Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, DefaultMaxPayload)},
		{Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, DefaultMaxPayload)}, {Data: make([]byte, 16)},
	}})
	refused("too many bytes", huge, wire.CodePayloadTooLarge)

	m := nats.NewMsg(wire.PublishBatchSubject(stream))
	m.Header.Set(wire.HeaderStreamID, "2")
	m.Data = frame.AppendPubBatch(nil, &frame.PubBatch{Records: recs("p", 1)})
	resp, err := f.nc.RequestMsg(m, 5*time.Second)
	if err != nil || codeOf(replyError(resp)) != wire.CodeNotFound {
		t.Fatalf("batch naming a deleted stream id: %v %v, want %s", err, resp, wire.CodeNotFound)
	}

	r := mustPubBatch(t, f.nc, stream, []frame.PubRecord{
		{Producer: "p", Seq: 1, Data: []byte("a")},
		{Producer: "p", Seq: 2, Data: make([]byte, DefaultMaxPayload+1)},
		{Data: []byte("b")},
	})
	wantResults(t, r, frame.PubResult{Offset: 0}, frame.PubResult{Code: wire.CodePayloadTooLarge}, frame.PubResult{Offset: 1})
	// Every record refused on its own: answered at once, nothing written.
	r = mustPubBatch(t, f.nc, stream, []frame.PubRecord{{Data: make([]byte, DefaultMaxPayload+1)}})
	wantResults(t, r, frame.PubResult{Code: wire.CodePayloadTooLarge})
	if pc := f.publishPlain(t, stream); pc.Offset != 2 {
		t.Fatalf("next record at offset %d, want 2: a refused record was written", pc.Offset)
	}
}

// publishPlain publishes one record without a producer and returns its
// confirm.
func (f *fixture) publishPlain(t *testing.T, stream string) wire.PublishConfirm {
	t.Helper()
	m := nats.NewMsg(wire.PublishSubject(stream))
	m.Data = []byte("plain")
	return f.mustConfirm(t, m)
}

// mustConfirm sends a single publish and returns its confirm.
func (f *fixture) mustConfirm(t *testing.T, m *nats.Msg) wire.PublishConfirm {
	t.Helper()
	resp, err := f.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pc, e := decodeTestConfirm(t, resp)
	if e != nil {
		t.Fatal(e)
	}
	return pc
}

// decodeTestConfirm decodes a single publish's reply.
func decodeTestConfirm(t *testing.T, resp *nats.Msg) (wire.PublishConfirm, *wire.Error) {
	t.Helper()
	if e := replyError(resp); e != nil {
		return wire.PublishConfirm{}, e
	}
	var pc wire.PublishConfirm
	if err := json.Unmarshal(resp.Data, &pc); err != nil {
		t.Fatalf("decode confirm %q: %v", resp.Data, err)
	}
	return pc, nil
}

// A batch refused whole gets the error reply of a single publish, with its
// Brook-Error header: not_enough_copies below the stream's floor (nothing
// written), confirm_timeout when W copies do not hold it in time.
func TestPublishBatchWholeRefusals(t *testing.T) {
	c := newMiniCluster(t)
	floor := assignment("pbfloor", 1, 1, "n1", []string{})
	floor.MinCopies = 2
	short := assignment("pbshort", 2, 1, "n1", []string{"n2", "n3"}, wire.HistoryStart{Epoch: 1, Node: "n1"})
	c.assign(floor, short)
	c.start("n1", func(cfg *Config) { cfg.ConfirmTimeout = 300 * time.Millisecond })
	for _, s := range []string{"pbfloor", "pbshort"} {
		c.waitCopy("n1", s, "owner", func(cs wire.CopyStatus) bool { return cs.Role == wire.RoleOwner })
	}
	body := frame.AppendPubBatch(nil, &frame.PubBatch{Records: recs("p", 1, 2)})
	if _, _, e := pubBatchTo(t, c.nc, "pbfloor", body, 10*time.Second); codeOf(e) != wire.CodeNotEnoughCopies {
		t.Fatalf("batch below the floor: %v, want %s", e, wire.CodeNotEnoughCopies)
	}
	if tail := c.hosts["n1"].h.store.Get("pbfloor").Tails().Record; tail != 0 {
		t.Fatalf("a refused batch was written: record tail %d", tail)
	}
	if _, _, e := pubBatchTo(t, c.nc, "pbshort", body, 10*time.Second); codeOf(e) != wire.CodeConfirmTimeout {
		t.Fatalf("batch held by one copy of the two needed: %v, want %s", e, wire.CodeConfirmTimeout)
	}
}
