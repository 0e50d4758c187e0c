package streamlog

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRecordBatchesInBlobFiles: a store made at Pebble's oldest format is
// ratcheted to value separation by Open, its batches go to blob files at
// the flush and stay there through a compaction, every record reads back,
// and deleting the copy leaves no blob file referenced.
func TestRecordBatchesInBlobFiles(t *testing.T) {
	dir := t.TempDir()
	big := func(tag string, n int) [][]byte {
		out := payloads(tag, 0, n)
		for i := range out {
			out[i] = append(out[i], bytes.Repeat([]byte{'x'}, 200)...)
		}
		return out
	}
	old := big("old", 300)
	func() {
		defer func(v pebble.FormatMajorVersion) { formatMajorVersion = v }(formatMajorVersion)
		formatMajorVersion = pebble.FormatMinSupported
		s := openTest(t, dir, nil)
		c := mustCreate(t, s, "s", 1)
		for i := 0; i < len(old); i += 50 {
			mustAppend(t, c, old[i:i+50])
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := s.db.Metrics().BlobFiles.LiveCount; n != 0 {
			t.Fatalf("at the oldest format: %d blob files", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()

	s := openTest(t, dir, nil)
	if v := s.db.FormatMajorVersion(); v != formatMajorVersion {
		t.Fatalf("format after Open: %s, want %s", v, formatMajorVersion)
	}
	c := s.Get("s")
	if c == nil {
		t.Fatal("copy s not found after reopen")
	}
	fresh := big("new", 300)
	var want int
	for i := 0; i < len(fresh); i += 50 {
		mustAppend(t, c, fresh[i:i+50])
		for _, d := range fresh[i : i+50] {
			want += len(d)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	if m.BlobFiles.LiveCount == 0 || m.BlobFiles.ReferencedValueSize < uint64(want) {
		t.Fatalf("after the flush: %d blob files referencing %d value bytes, want the %d data bytes appended since the reopen",
			m.BlobFiles.LiveCount, m.BlobFiles.ReferencedValueSize, want)
	}
	if err := s.db.Compact(t.Context(), []byte("c"), []byte("d"), true); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.ReferencedValueSize < uint64(want) {
		t.Fatalf("after a compaction: blob files reference %d value bytes, want at least %d", m.BlobFiles.ReferencedValueSize, want)
	}
	if got, all := dataOf(readAll(t, c)), append(append([][]byte{}, old...), fresh...); !equalData(got, all) {
		t.Fatalf("read back %d records, want the %d appended", len(got), len(all))
	}

	if err := s.Delete("s"); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(t.Context(), []byte("c"), []byte("d"), true); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.LiveCount != 0 {
		t.Fatalf("after the copy's deletion and a compaction: %d blob files still referenced (%d value bytes)",
			m.BlobFiles.LiveCount, m.BlobFiles.ReferencedValueSize)
	}
}
