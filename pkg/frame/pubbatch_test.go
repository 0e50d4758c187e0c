package frame_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/brook-streams/brook/pkg/frame"
)

var (
	pubHdr   = []byte{frame.Magic, frame.Version, frame.KindPubBatch}
	replyHdr = []byte{frame.Magic, frame.Version, frame.KindPubReply}
)

// samplePub is a realistic publish batch: two producers, a record without
// one, an empty record.
func samplePub() *frame.PubBatch {
	return &frame.PubBatch{Records: []frame.PubRecord{
		{Producer: "orders-1", Seq: 41, Data: []byte("hello")},
		{Producer: "orders-1", Seq: 42, Data: []byte{}},
		{Data: bytes.Repeat([]byte{0xee}, 300)},
		{Producer: "b", Seq: math.MaxUint64, Data: []byte("x")},
	}}
}

func sampleReply() *frame.PubReply {
	return &frame.PubReply{Copies: 3, W: 2, Results: []frame.PubResult{
		{Offset: 1000},
		{Offset: 1001},
		{Offset: 17, Duplicate: true},
		{Code: "payload_too_large"},
		{Offset: math.MaxUint64},
	}}
}

// equalPub compares publish batches treating nil and empty data alike.
func equalPub(t fataler, want, got *frame.PubBatch) {
	t.Helper()
	if len(want.Records) != len(got.Records) {
		t.Fatalf("records: want %d, got %d", len(want.Records), len(got.Records))
	}
	for i := range want.Records {
		w, g := want.Records[i], got.Records[i]
		if w.Producer != g.Producer || !bytes.Equal(w.Data, g.Data) || (w.Producer != "" && w.Seq != g.Seq) {
			t.Fatalf("record %d: want %+v, got %+v", i, w, g)
		}
		if g.Data == nil {
			t.Fatalf("record %d: nil data, want empty", i)
		}
	}
}

func TestPubBatchRoundTrip(t *testing.T) {
	for name, b := range map[string]*frame.PubBatch{
		"sample":           samplePub(),
		"one empty record": {Records: []frame.PubRecord{{}}},
		"longest producer": {Records: []frame.PubRecord{{Producer: strings.Repeat("p", frame.MaxPubProducer), Seq: 1, Data: []byte("d")}}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := frame.AppendPubBatch(nil, b)
			got, err := frame.DecodePubBatch(enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			equalPub(t, b, got)
			if re := frame.AppendPubBatch(nil, got); !bytes.Equal(re, enc) {
				t.Fatalf("re-encoding differs")
			}
		})
	}
}

func TestPubBatchDataAliasesInputWithCappedCapacity(t *testing.T) {
	enc := frame.AppendPubBatch(nil, samplePub())
	got, err := frame.DecodePubBatch(enc)
	if err != nil {
		t.Fatal(err)
	}
	d := got.Records[0].Data
	if cap(d) != len(d) {
		t.Fatalf("data capacity %d, want its length %d", cap(d), len(d))
	}
	if got.Records[0].Producer != got.Records[1].Producer {
		t.Fatalf("producers differ")
	}
}

func TestPubReplyRoundTrip(t *testing.T) {
	for name, r := range map[string]*frame.PubReply{
		"sample":     sampleReply(),
		"one":        {Copies: 1, W: 1, Results: []frame.PubResult{{Offset: 0}}},
		"max copies": {Copies: frame.MaxPubCopies, W: frame.MaxPubCopies, Results: []frame.PubResult{{Duplicate: true, Offset: 5}}},
	} {
		t.Run(name, func(t *testing.T) {
			enc := frame.AppendPubReply(nil, r)
			got, err := frame.DecodePubReply(enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Fatalf("want %+v, got %+v", r, got)
			}
		})
	}
}

func TestDecodePubBatchRejects(t *testing.T) {
	good := frame.AppendPubBatch(nil, samplePub())
	cases := map[string][]byte{
		"nil":                  nil,
		"header only":          pubHdr,
		"other kind":           cat([]byte{frame.Magic, frame.Version, frame.KindPubReply}, good[3:]),
		"version 1":            cat([]byte{frame.Magic, 1, frame.KindPubBatch}, good[3:]),
		"no records":           cat(pubHdr, uv(0)),
		"count over the limit": cat(pubHdr, uv(frame.MaxBatchRecords+1)),
		"count over the input": cat(pubHdr, uv(3), uv(0, 1), []byte("x")),
		"producer too long":    cat(pubHdr, uv(1, frame.MaxPubProducer+1), bytes.Repeat([]byte("p"), frame.MaxPubProducer+1), uv(1, 0)),
		"no sequence":          cat(pubHdr, uv(1, 1), []byte("p")),
		"data past the end":    cat(pubHdr, uv(1, 0, 5), []byte("abc")),
		"data over the limit":  cat(pubHdr, uv(1, 0, frame.MaxRecordSize+1)),
		"non-minimal varint":   cat(pubHdr, []byte{0x81, 0x00}, uv(0, 0)),
		"trailing byte":        cat(good, []byte{0}),
		"truncated":            good[:len(good)-1],
	}
	expectMalformed(t, cases, frame.DecodePubBatch)
}

func TestDecodePubReplyRejects(t *testing.T) {
	good := frame.AppendPubReply(nil, sampleReply())
	cases := map[string][]byte{
		"nil":                  nil,
		"other kind":           cat(pubHdr, good[3:]),
		"no results":           cat(replyHdr, uv(1, 1, 0)),
		"copies over":          cat(replyHdr, uv(frame.MaxPubCopies+1, 1, 1, 0, 0)),
		"count over the input": cat(replyHdr, uv(1, 1, 2, 0, 0)),
		"unknown status":       cat(replyHdr, uv(1, 1, 1), []byte{3, 0}),
		"code not a name":      cat(replyHdr, uv(1, 1, 1), []byte{2, 1, '.'}),
		"empty code":           cat(replyHdr, uv(1, 1, 1), []byte{2, 0}),
		"no offset":            cat(replyHdr, uv(1, 1, 2), []byte{2, 1, 'x', 0}),
		"trailing byte":        cat(good, []byte{0}),
		"truncated":            good[:len(good)-1],
	}
	expectMalformed(t, cases, frame.DecodePubReply)
}

// expectMalformed checks that decode refuses every case with ErrMalformed.
func expectMalformed[T any](t *testing.T, cases map[string][]byte, decode func([]byte) (*T, error)) {
	t.Helper()
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := decode(p); !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
}

// TestPubGoldenBytes pins the examples of schemas/frames.md.
func TestPubGoldenBytes(t *testing.T) {
	b := &frame.PubBatch{Records: []frame.PubRecord{
		{Producer: "p1", Seq: 7, Data: []byte("ab")},
		{Data: []byte("c")},
	}}
	want := []byte{
		0xB5, 0x02, 0x03, // magic, version 2, publish batch
		0x02,                 // 2 records
		0x02, 'p', '1', 0x07, // producer "p1", sequence 7
		0x02, 'a', 'b', // 2 bytes "ab"
		0x00,      // no producer
		0x01, 'c', // 1 byte "c"
	}
	if got := frame.AppendPubBatch(nil, b); !bytes.Equal(got, want) {
		t.Fatalf("publish batch bytes\n got % x\nwant % x", got, want)
	}
	r := &frame.PubReply{Copies: 3, W: 2, Results: []frame.PubResult{
		{Offset: 100}, {Offset: 101}, {Offset: 40, Duplicate: true}, {Code: "bad_request"},
	}}
	wantR := []byte{
		0xB5, 0x02, 0x04, // magic, version 2, publish reply
		0x03, 0x02, 0x04, // copies 3, W 2, 4 results
		0x00, 0xC8, 0x01, // written, offset +100 (zigzag 200)
		0x00, 0x02, // written, +1
		0x01, 0x79, // duplicate, -61 (zigzag 121)
		0x02, 0x0B, 'b', 'a', 'd', '_', 'r', 'e', 'q', 'u', 'e', 's', 't', // refused, code
	}
	if got := frame.AppendPubReply(nil, r); !bytes.Equal(got, wantR) {
		t.Fatalf("publish reply bytes\n got % x\nwant % x", got, wantR)
	}
}

func TestPropertyPubRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 20).Draw(t, "records")
		b := &frame.PubBatch{}
		r := &frame.PubReply{Copies: rapid.IntRange(0, 5).Draw(t, "copies"), W: rapid.IntRange(0, 5).Draw(t, "w")}
		for range n {
			b.Records = append(b.Records, frame.PubRecord{
				Producer: rapid.SampledFrom([]string{"", "a", "orders-7"}).Draw(t, "producer"),
				Seq:      rapid.Uint64().Draw(t, "seq"),
				Data:     rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data"),
			})
			res := frame.PubResult{Offset: rapid.Uint64().Draw(t, "offset"), Duplicate: rapid.Bool().Draw(t, "dup")}
			if rapid.IntRange(0, 4).Draw(t, "refused") == 0 {
				res = frame.PubResult{Code: rapid.StringMatching(`[a-z_]{1,20}`).Draw(t, "code")}
			}
			r.Results = append(r.Results, res)
		}
		gotB, err := frame.DecodePubBatch(frame.AppendPubBatch(nil, b))
		if err != nil {
			t.Fatalf("decode batch: %v", err)
		}
		equalPub(t, b, gotB)
		gotR, err := frame.DecodePubReply(frame.AppendPubReply(nil, r))
		if err != nil {
			t.Fatalf("decode reply: %v", err)
		}
		if !reflect.DeepEqual(gotR, r) {
			t.Fatalf("reply: want %+v, got %+v", r, gotR)
		}
	})
}

// FuzzDecodePubBatch is FuzzDecodeBatch for publish batches.
func FuzzDecodePubBatch(f *testing.F) {
	f.Add(frame.AppendPubBatch(nil, samplePub()))
	f.Add(frame.AppendPubBatch(nil, &frame.PubBatch{Records: []frame.PubRecord{{}}}))
	f.Add(cat(pubHdr, uv(1, 1), []byte("p"), uv(1, 0)))
	f.Add(cat(pubHdr, uv(2, 0, 0, 0)))
	f.Add(cat(pubHdr, uv(0)))
	f.Add([]byte{})
	fuzzCanonical(f, frame.DecodePubBatch, frame.AppendPubBatch)
}

// FuzzDecodePubReply is FuzzDecodeBatch for publish replies.
func FuzzDecodePubReply(f *testing.F) {
	f.Add(frame.AppendPubReply(nil, sampleReply()))
	f.Add(frame.AppendPubReply(nil, &frame.PubReply{Copies: 1, W: 1, Results: []frame.PubResult{{}}}))
	f.Add(cat(replyHdr, uv(1, 1, 1), []byte{2, 1, 'x'}))
	f.Add(cat(replyHdr, uv(1, 1, 1), []byte{1, 1}))
	f.Add([]byte{})
	fuzzCanonical(f, frame.DecodePubReply, frame.AppendPubReply)
}

// fuzzCanonical fuzzes decode: any input either decodes or fails with
// ErrMalformed without panicking, and whatever decodes re-encodes to the
// very same bytes.
func fuzzCanonical[T any](f *testing.F, decode func([]byte) (*T, error), encode func([]byte, *T) []byte) {
	f.Fuzz(func(t *testing.T, p []byte) {
		v, err := decode(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := encode(nil, v); !bytes.Equal(re, p) {
			t.Fatalf("decoded frame re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}
