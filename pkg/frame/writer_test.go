package frame_test

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"

	"github.com/brook-streams/brook/pkg/frame"
)

// writeBatch encodes b with w.
func writeBatch(w *frame.BatchWriter, b *frame.Batch) []byte {
	w.Reset(0)
	for _, r := range b.Records {
		w.Add(r.Offset, r.TimeNS, r.Data)
	}
	return w.Finish(b)
}

// A BatchWriter writes exactly AppendBatch's bytes, however large its
// buffer was made and however often it is reused.
func TestBatchWriterMatchesAppendBatch(t *testing.T) {
	var w frame.BatchWriter
	for _, b := range []*frame.Batch{sampleBatch(), {}, {Epoch: 1, Next: 9, Records: []frame.Record{{Offset: 8, Data: []byte("x")}}}} {
		want := frame.AppendBatch(nil, b)
		if got := writeBatch(&w, b); !bytes.Equal(got, want) {
			t.Fatalf("writer\n got % x\nwant % x", got, want)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		b := genBatch(rt)
		want := frame.AppendBatch(nil, b)
		w := frame.NewBatchWriter(rapid.IntRange(0, 4096).Draw(rt, "size hint"))
		got := writeBatch(w, b)
		if !bytes.Equal(got, want) {
			rt.Fatalf("writer\n got % x\nwant % x", got, want)
		}
		if w.Len() != len(b.Records) {
			rt.Fatalf("Len %d, want %d", w.Len(), len(b.Records))
		}
		// Reusing the writer's own buffer gives the same bytes again.
		again := writeBatch(w, b)
		if !bytes.Equal(again, want) {
			rt.Fatalf("reused writer\n got % x\nwant % x", again, want)
		}
	})
}

// A record's data is copied at Add: the caller may overwrite it at once.
func TestBatchWriterCopiesData(t *testing.T) {
	w := frame.NewBatchWriter(0)
	data := []byte("abc")
	w.Add(3, 10, data)
	copy(data, "xyz")
	got, err := frame.DecodeBatch(w.Finish(&frame.Batch{Next: 4}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 1 || string(got.Records[0].Data) != "abc" || got.Records[0].Offset != 3 || got.Records[0].TimeNS != 10 {
		t.Fatalf("decoded %+v", got.Records)
	}
}

func BenchmarkBatchWriter256x256(b *testing.B) {
	batch := benchBatch()
	w := frame.NewBatchWriter(0)
	b.SetBytes(int64(len(writeBatch(w, batch))))
	b.ReportAllocs()
	for b.Loop() {
		writeBatch(w, batch)
	}
}
