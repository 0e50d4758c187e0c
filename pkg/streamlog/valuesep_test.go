package streamlog

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// paddedPayloads returns n distinct payloads of about 210 bytes, so that
// a batch of five or more is separated into a blob file.
func paddedPayloads(tag string, n int) [][]byte {
	out := payloads(tag, 0, n)
	for i := range out {
		out[i] = append(out[i], bytes.Repeat([]byte{'x'}, 200)...)
	}
	return out
}

// TestRecordBatchesInBlobFiles: a store made at Pebble's oldest format is
// ratcheted to value separation by Open, its batches go to blob files at
// the flush and stay there through a compaction, every record reads back,
// and deleting the copy leaves no blob file referenced.
func TestRecordBatchesInBlobFiles(t *testing.T) {
	dir := t.TempDir()
	old := paddedPayloads("old", 300)
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
	fresh := paddedPayloads("new", 300)
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

// blobReadFault fails every read of a blob file once switched on.
type blobReadFault struct{ on atomic.Bool }

func (f *blobReadFault) MaybeError(op errorfs.Op) error {
	if f.on.Load() && strings.HasSuffix(op.Path, ".blob") && (op.Kind == errorfs.OpFileRead || op.Kind == errorfs.OpFileReadAt) {
		return errorfs.ErrInjected
	}
	return nil
}

func (f *blobReadFault) String() string { return "blob read fault" }

// TestBlobReadErrorIsTheReadsError: a read of records whose batch is in a
// blob file that cannot be read fails with that error, not as a batch
// found malformed.
func TestBlobReadErrorIsTheReadsError(t *testing.T) {
	fault := &blobReadFault{}
	s, err := openWith(Options{Dir: t.TempDir(), Logger: quietLogger(), CursorSyncInterval: time.Hour,
		FS: errorfs.Wrap(vfs.Default, fault)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := mustCreate(t, s, "s", 1)
	data := paddedPayloads("r", 50)
	mustAppend(t, c, data)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := s.db.Metrics().BlobFiles.LiveCount; n == 0 {
		t.Fatal("the flush wrote no blob file")
	}
	fault.on.Store(true)
	_, err = c.Read(0, 10, 1<<20, 50)
	if !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("read with the blob file failing: %v, want the injected error", err)
	}
	fault.on.Store(false)
	if got := dataOf(readAll(t, c)); !equalData(got, data) {
		t.Fatalf("read back %d records after the fault, want %d", len(got), len(data))
	}
}
