package frame_test

import (
	"testing"

	"github.com/brook-streams/brook/pkg/frame"
)

// benchBatch is 256 records of 256 bytes, the size of a busy replication
// batch.
func benchBatch() *frame.Batch {
	b := &frame.Batch{Epoch: 4, Head: 0, Tail: 1 << 20, Confirmed: 1 << 20, Next: 1<<20 - 256}
	t0 := int64(1_760_000_000_000_000_000)
	for i := range 256 {
		data := make([]byte, 256)
		for j := range data {
			data[j] = byte(i + j)
		}
		b.Records = append(b.Records, frame.Record{Offset: b.Next + uint64(i), TimeNS: t0 + int64(i)*1500, Data: data})
	}
	return b
}

func BenchmarkAppendBatch256x256(b *testing.B) {
	batch := benchBatch()
	buf := frame.AppendBatch(nil, batch)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = frame.AppendBatch(buf[:0], batch)
	}
}

func BenchmarkDecodeBatch256x256(b *testing.B) {
	buf := frame.AppendBatch(nil, benchBatch())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := frame.DecodeBatch(buf); err != nil {
			b.Fatal(err)
		}
	}
}
