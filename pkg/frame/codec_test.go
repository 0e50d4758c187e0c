package frame_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/brook-streams/brook/pkg/frame"
)

// sampleBatch is a realistic replication batch: records and cursor events,
// times a few microseconds apart, one empty record.
func sampleBatch() *frame.Batch {
	const t0 = 1_760_000_000_123_456_789
	return &frame.Batch{
		Epoch: 7, Head: 100, HeadDigest: 0x0123456789abcdef, Tail: 1003, Confirmed: 1001, Next: 1003,
		Records: []frame.Record{
			{Offset: 1000, TimeNS: t0, Data: []byte("hello")},
			{Offset: 1001, TimeNS: t0 + 3_000, Data: []byte{}},
			{Offset: 1002, TimeNS: t0 - 5, Data: bytes.Repeat([]byte{0xff}, 300)},
		},
		CursorEvents: []frame.CursorEvent{
			{Offset: 40, Cursor: "billing", Position: 990},
			{Offset: 41, Cursor: "audit-2_x", Position: 1001},
		},
	}
}

func sampleRepl() *frame.ReplRequest {
	return &frame.ReplRequest{
		Node: "node-2", Epoch: 7, StreamID: 42, RecordTail: 1003, CursorTail: 41,
		WaitMS: 500, MaxBytes: 1 << 20, TailDigest: 0xfedcba9876543210,
	}
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// equalBatch compares batches treating nil and empty slices alike, since
// the encoding does not tell them apart.
func equalBatch(t fataler, want, got *frame.Batch) {
	t.Helper()
	if want.Epoch != got.Epoch || want.Head != got.Head || want.HeadDigest != got.HeadDigest || want.Tail != got.Tail ||
		want.Confirmed != got.Confirmed || want.Next != got.Next {
		t.Fatalf("header: want %+v, got %+v", *want, *got)
	}
	if len(want.Records) != len(got.Records) {
		t.Fatalf("records: want %d, got %d", len(want.Records), len(got.Records))
	}
	for i := range want.Records {
		w, g := want.Records[i], got.Records[i]
		if w.Offset != g.Offset || w.TimeNS != g.TimeNS || !bytes.Equal(w.Data, g.Data) {
			t.Fatalf("record %d: want %+v, got %+v", i, w, g)
		}
	}
	if len(want.CursorEvents) != len(got.CursorEvents) {
		t.Fatalf("cursor events: want %d, got %d", len(want.CursorEvents), len(got.CursorEvents))
	}
	for i := range want.CursorEvents {
		if want.CursorEvents[i] != got.CursorEvents[i] {
			t.Fatalf("cursor event %d: want %+v, got %+v", i, want.CursorEvents[i], got.CursorEvents[i])
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	for name, b := range map[string]*frame.Batch{
		"sample": sampleBatch(),
		"empty":  {},
		"max header": {Epoch: math.MaxUint64, Head: math.MaxUint64, HeadDigest: math.MaxUint64, Tail: math.MaxUint64,
			Confirmed: math.MaxUint64, Next: math.MaxUint64},
		"offsets at the top": {Records: []frame.Record{
			{Offset: math.MaxUint64 - 1, TimeNS: math.MinInt64, Data: []byte("a")},
			{Offset: math.MaxUint64, TimeNS: math.MaxInt64, Data: []byte("b")},
		}},
		"events only": {CursorEvents: []frame.CursorEvent{{Offset: 0, Cursor: strings.Repeat("c", 64), Position: 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := frame.AppendBatch([]byte("prefix"), b)
			if !bytes.HasPrefix(enc, []byte("prefix")) {
				t.Fatalf("AppendBatch dropped dst")
			}
			got, err := frame.DecodeBatch(enc[len("prefix"):])
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			equalBatch(t, b, got)
		})
	}
}

func TestBatchDataAliasesInputWithCappedCapacity(t *testing.T) {
	enc := frame.AppendBatch(nil, sampleBatch())
	got, err := frame.DecodeBatch(enc)
	if err != nil {
		t.Fatal(err)
	}
	r0 := got.Records[0].Data
	if cap(r0) != len(r0) {
		t.Fatalf("record data capacity %d, want %d so an append cannot clobber the next record", cap(r0), len(r0))
	}
	r0[0] = 'J'
	if !bytes.Contains(enc, []byte("Jello")) {
		t.Fatalf("record data does not alias the input")
	}
}

func TestReplRequestRoundTrip(t *testing.T) {
	for name, r := range map[string]*frame.ReplRequest{
		"sample": sampleRepl(),
		"max": {Node: strings.Repeat("n", 64), Epoch: math.MaxUint64, StreamID: math.MaxUint64,
			RecordTail: math.MaxUint64, CursorTail: math.MaxUint64, WaitMS: math.MaxUint32, MaxBytes: math.MaxUint32,
			TailDigest: math.MaxUint64},
		"zero":              {Node: "a"},
		"read ahead":        {Node: "a", RecordTail: 10, TailDigest: 1, ReadFrom: 14, ReadDigest: 2},
		"read ahead to max": {Node: "a", RecordTail: 10, TailDigest: 1, ReadFrom: math.MaxUint64, ReadDigest: math.MaxUint64},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := frame.DecodeReplRequest(frame.AppendReplRequest(nil, r))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if *got != *r {
				t.Fatalf("want %+v, got %+v", *r, *got)
			}
		})
	}
}

// uv builds frame bytes by hand for the malformed cases.
func uv(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	batchHdr = []byte{frame.Magic, frame.Version, frame.KindBatch}
	replHdr  = []byte{frame.Magic, frame.Version, frame.KindReplRequest}
	// zeroHdr5 is a batch's fixed fields, all zero: epoch, head, head
	// digest (8 bytes), tail, confirmed, next.
	zeroHdr5 = cat(uv(0, 0), make([]byte, 8), uv(0, 0, 0))
	// noDigest is the 8-byte zero digest of a replication request.
	noDigest = make([]byte, 8)
)

func TestDecodeBatchRejects(t *testing.T) {
	good := frame.AppendBatch(nil, sampleBatch())
	cases := map[string][]byte{
		"nil":                 nil,
		"short header":        {frame.Magic, frame.Version},
		"bad magic":           cat([]byte{'{', frame.Version, frame.KindBatch}, zeroHdr5, uv(0, 0)),
		"future version":      cat([]byte{frame.Magic, 3, frame.KindBatch}, zeroHdr5, uv(0, 0)),
		"version 1":           cat([]byte{frame.Magic, 1, frame.KindBatch}, uv(0, 0, 0, 0, 0), uv(0, 0)),
		"short head digest":   cat(batchHdr, uv(0, 0), []byte{1, 2, 3}),
		"repl kind":           cat(replHdr, zeroHdr5, uv(0, 0)),
		"truncated header":    cat(batchHdr, uv(1, 2)),
		"varint overflow":     cat(batchHdr, bytes.Repeat([]byte{0xff}, 10), []byte{0x7f}),
		"non-minimal varint":  cat(batchHdr, []byte{0x80, 0x00}, uv(0, 0, 0, 0, 0, 0)),
		"count past input":    cat(batchHdr, zeroHdr5, uv(1000, 5), uv(0, 1), []byte("x")),
		"count over limit":    cat(batchHdr, zeroHdr5, uv(frame.MaxBatchRecords+1, 0)),
		"huge count":          cat(batchHdr, zeroHdr5, uv(math.MaxUint64, 0)),
		"length past input":   cat(batchHdr, zeroHdr5, uv(1, 0, 0, 50), []byte("short"), uv(0)),
		"huge length":         cat(batchHdr, zeroHdr5, uv(1, 0, 0, math.MaxUint64), uv(0)),
		"length over limit":   cat(batchHdr, zeroHdr5, uv(1, 0, 0, frame.MaxRecordSize+1), uv(0)),
		"offset overflow":     cat(batchHdr, zeroHdr5, uv(2, math.MaxUint64, 0, 1), []byte("a"), uv(0, 1), []byte("b"), uv(0)),
		"missing event count": cat(batchHdr, zeroHdr5, uv(0)),
		"empty cursor name":   cat(batchHdr, zeroHdr5, uv(0, 1, 0, 0, 5, 0)),
		"long cursor name":    cat(batchHdr, zeroHdr5, uv(0, 1, 0, 65), bytes.Repeat([]byte("c"), 65), uv(1)),
		"bad cursor byte":     cat(batchHdr, zeroHdr5, uv(0, 1, 0, 3), []byte("a.b"), uv(1)),
		"trailing byte":       append(append([]byte{}, good...), 0),
		"truncated":           good[:len(good)-1],
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := frame.DecodeBatch(p)
			if err == nil {
				t.Fatalf("decoded %+v, want an error", b)
			}
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

func TestDecodeReplRequestRejects(t *testing.T) {
	good := frame.AppendReplRequest(nil, sampleRepl())
	cases := map[string][]byte{
		"nil":               nil,
		"batch kind":        cat(batchHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0)),
		"empty node":        cat(replHdr, uv(0, 0, 0, 0, 0, 0, 0)),
		"long node":         cat(replHdr, uv(65), bytes.Repeat([]byte("n"), 65), uv(0, 0, 0, 0, 0, 0)),
		"bad node byte":     cat(replHdr, uv(2), []byte("n*"), uv(0, 0, 0, 0, 0, 0)),
		"node past input":   cat(replHdr, uv(10), []byte("n")),
		"wait over 32":      cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, math.MaxUint32+1, 0)),
		"maxbytes over 32":  cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, math.MaxUint32+1)),
		"version 1":         cat([]byte{frame.Magic, 1, frame.KindReplRequest}, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0)),
		"no tail digest":    cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0)),
		"short digest":      cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0), []byte{1, 2, 3, 4, 5, 6, 7}),
		"trailing byte":     append(append([]byte{}, good...), 0),
		"read ahead 0":      cat(good, uv(0), noDigest),
		"read ahead wraps":  cat(replHdr, uv(1), []byte("n"), uv(0, 0, math.MaxUint64, 0, 0, 0), noDigest, uv(1), noDigest),
		"no read digest":    cat(good, uv(3)),
		"short read digest": cat(good, uv(3), []byte{1, 2, 3}),
		"past read digest":  cat(good, uv(3), noDigest, []byte{0}),
		"truncated":         good[:len(good)-1],
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := frame.DecodeReplRequest(p)
			if err == nil {
				t.Fatalf("decoded %+v, want an error", r)
			}
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

// TestGoldenBytes pins the layout of schemas/frames.md: a change to the
// encoding must be a deliberate new version, not an accident.
func TestGoldenBytes(t *testing.T) {
	b := &frame.Batch{Epoch: 3, Head: 1, HeadDigest: 0x0102030405060708, Tail: 12, Confirmed: 11, Next: 12,
		Records: []frame.Record{
			{Offset: 10, TimeNS: 1000, Data: []byte("ab")},
			{Offset: 11, TimeNS: 999, Data: nil},
		},
		CursorEvents: []frame.CursorEvent{{Offset: 5, Cursor: "c1", Position: 300}},
	}
	want := []byte{
		0xB5, 0x02, 0x01, // magic, version 2, kind batch
		0x03, 0x01, // epoch 3, head 1
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // head digest
		0x0C, 0x0B, 0x0C, // tail 12, confirmed 11, next 12
		0x02, 0x0A, // 2 records from offset 10
		0xD0, 0x0F, 0x02, 'a', 'b', // time +1000 (zigzag 2000), length 2, "ab"
		0x01, 0x00, // time -1 (zigzag 1), length 0
		0x01, 0x05, // 1 cursor event from offset 5
		0x02, 'c', '1', 0xAC, 0x02, // name "c1", position 300
	}
	if got := frame.AppendBatch(nil, b); !bytes.Equal(got, want) {
		t.Fatalf("batch bytes\n got % x\nwant % x", got, want)
	}
	r := &frame.ReplRequest{Node: "n1", Epoch: 3, StreamID: 9, RecordTail: 12, CursorTail: 6, WaitMS: 200, MaxBytes: 65536,
		TailDigest: 0xA1B2C3D4E5F60718}
	wantR := []byte{
		0xB5, 0x02, 0x02, // magic, version 2, kind repl request
		0x02, 'n', '1', // node "n1"
		0x03, 0x09, 0x0C, 0x06, // epoch, stream id, record tail, cursor tail
		0xC8, 0x01, // wait 200
		0x80, 0x80, 0x04, // max bytes 65536
		0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6, 0x07, 0x18, // tail digest
	}
	if got := frame.AppendReplRequest(nil, r); !bytes.Equal(got, wantR) {
		t.Fatalf("repl request bytes\n got % x\nwant % x", got, wantR)
	}
	// The same request reading from its written tail 15, 3 past the
	// durable one: the read ahead and read digest follow.
	r.ReadFrom, r.ReadDigest = 15, 0x1122334455667788
	wantR = append(wantR, 0x03, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88)
	if got := frame.AppendReplRequest(nil, r); !bytes.Equal(got, wantR) {
		t.Fatalf("repl request with read position bytes\n got % x\nwant % x", got, wantR)
	}
}

// TestReplRequestReadPosition: a request without a read position past its
// record tail reads from the record tail with its tail digest, encoded as
// a request without one.
func TestReplRequestReadPosition(t *testing.T) {
	for _, r := range []frame.ReplRequest{
		{Node: "a", RecordTail: 10, TailDigest: 1},
		{Node: "a", RecordTail: 10, TailDigest: 1, ReadFrom: 10, ReadDigest: 9},
		{Node: "a", RecordTail: 10, TailDigest: 1, ReadFrom: 4, ReadDigest: 9},
	} {
		if from, d := r.ReadPosition(); from != 10 || d != 1 {
			t.Fatalf("%+v reads from %d at digest %x, want 10 at 1", r, from, d)
		}
		plain := frame.ReplRequest{Node: "a", RecordTail: 10, TailDigest: 1}
		if !bytes.Equal(frame.AppendReplRequest(nil, &r), frame.AppendReplRequest(nil, &plain)) {
			t.Fatalf("%+v encodes other bytes than the request without a read position", r)
		}
	}
	r := frame.ReplRequest{Node: "a", RecordTail: 10, TailDigest: 1, ReadFrom: 12, ReadDigest: 9}
	if from, d := r.ReadPosition(); from != 12 || d != 9 {
		t.Fatalf("%+v reads from %d at digest %x, want 12 at 9", r, from, d)
	}
}

// genBatch draws batches that honour the contract: contiguous offsets whose
// last one fits 64 bits, valid cursor names.
func genBatch(t *rapid.T) *frame.Batch {
	b := &frame.Batch{
		Epoch:      rapid.Uint64().Draw(t, "epoch"),
		Head:       rapid.Uint64().Draw(t, "head"),
		HeadDigest: rapid.Uint64().Draw(t, "head digest"),
		Tail:       rapid.Uint64().Draw(t, "tail"),
		Confirmed:  rapid.Uint64().Draw(t, "confirmed"),
		Next:       rapid.Uint64().Draw(t, "next"),
	}
	n := rapid.IntRange(0, 20).Draw(t, "records")
	if n > 0 {
		first := rapid.Uint64Max(math.MaxUint64-uint64(n-1)).Draw(t, "first")
		for i := range n {
			b.Records = append(b.Records, frame.Record{
				Offset: first + uint64(i),
				TimeNS: rapid.Int64().Draw(t, "time"),
				Data:   rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data"),
			})
		}
	}
	m := rapid.IntRange(0, 10).Draw(t, "events")
	if m > 0 {
		first := rapid.Uint64Max(math.MaxUint64-uint64(m-1)).Draw(t, "first event")
		for i := range m {
			b.CursorEvents = append(b.CursorEvents, frame.CursorEvent{
				Offset:   first + uint64(i),
				Cursor:   rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`).Draw(t, "cursor"),
				Position: rapid.Uint64().Draw(t, "position"),
			})
		}
	}
	return b
}

func TestPropertyBatchRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBatch(t)
		enc := frame.AppendBatch(nil, b)
		got, err := frame.DecodeBatch(enc)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		equalBatch(t, b, got)
		// Canonical: re-encoding yields the same bytes.
		if re := frame.AppendBatch(nil, got); !bytes.Equal(re, enc) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func TestPropertyReplRequestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &frame.ReplRequest{
			Node:       rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`).Draw(t, "node"),
			Epoch:      rapid.Uint64().Draw(t, "epoch"),
			StreamID:   rapid.Uint64().Draw(t, "stream id"),
			RecordTail: rapid.Uint64().Draw(t, "record tail"),
			CursorTail: rapid.Uint64().Draw(t, "cursor tail"),
			WaitMS:     rapid.Uint32().Draw(t, "wait"),
			MaxBytes:   rapid.Uint32().Draw(t, "max bytes"),
			TailDigest: rapid.Uint64().Draw(t, "tail digest"),
		}
		got, err := frame.DecodeReplRequest(frame.AppendReplRequest(nil, r))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if *got != *r {
			t.Fatalf("want %+v, got %+v", *r, *got)
		}
	})
}
