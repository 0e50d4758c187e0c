package frame_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/brook-streams/brook/pkg/frame"
)

// FuzzDecodeBatch checks that any input either decodes or fails with
// ErrMalformed without panicking, and that whatever decodes re-encodes to
// the very same bytes (the encoding is canonical, so the decoder accepts
// nothing the encoder would not write).
func FuzzDecodeBatch(f *testing.F) {
	f.Add(frame.AppendBatch(nil, sampleBatch()))
	f.Add(frame.AppendBatch(nil, &frame.Batch{}))
	f.Add(frame.AppendBatch(nil, &frame.Batch{Epoch: 1, Records: []frame.Record{{Offset: 5, Data: []byte("x")}}}))
	f.Add(frame.AppendBatch(nil, &frame.Batch{CursorEvents: []frame.CursorEvent{{Offset: 1, Cursor: "c", Position: 2}}}))
	f.Add(cat(batchHdr, zeroHdr5, uv(1000, 5), uv(0, 1), []byte("x")))
	f.Add(frame.AppendBatch(nil, &frame.Batch{Head: 9, HeadDigest: 0xdeadbeefcafef00d, Tail: 9, Next: 9}))
	f.Add(cat([]byte{frame.Magic, 1, frame.KindBatch}, uv(0, 0, 0, 0, 0), uv(0, 0)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := frame.DecodeBatch(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := frame.AppendBatch(nil, b); !bytes.Equal(re, p) {
			t.Fatalf("decoded frame re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}

// FuzzDecodeReplRequest is FuzzDecodeBatch for replication requests.
func FuzzDecodeReplRequest(f *testing.F) {
	f.Add(frame.AppendReplRequest(nil, sampleRepl()))
	f.Add(frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "a"}))
	f.Add(frame.AppendReplRequest(nil, &frame.ReplRequest{Node: "a", RecordTail: 5, ReadFrom: 9, ReadDigest: 7}))
	f.Add(cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0), noDigest, uv(0), noDigest))
	f.Add(cat(replHdr, uv(65)))
	f.Add(cat(replHdr, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0), noDigest))
	f.Add(cat([]byte{frame.Magic, 1, frame.KindReplRequest}, uv(1), []byte("n"), uv(0, 0, 0, 0, 0, 0)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := frame.DecodeReplRequest(p)
		if err != nil {
			if !errors.Is(err, frame.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if re := frame.AppendReplRequest(nil, r); !bytes.Equal(re, p) {
			t.Fatalf("decoded request re-encodes differently\n in % x\nout % x", p, re)
		}
	})
}
