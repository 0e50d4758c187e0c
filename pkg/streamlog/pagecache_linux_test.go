package streamlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages returns how many of the file's pages are in the page
// cache, and how many pages it has.
func residentPages(t *testing.T, path string) (resident, pages int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 {
		return 0, 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	pageSize := os.Getpagesize()
	vec := make([]byte, (len(m)+pageSize-1)/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			resident++
		}
	}
	return resident, len(vec)
}

// TestFlushedBlobFilesLeaveThePageCache: the blob files a flush writes
// are not in the page cache once written (writtenOnceFS), while a file
// written and synced the ordinary way is, so the check can tell.
func TestFlushedBlobFilesLeaveThePageCache(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(dir, "control")
	if err := os.WriteFile(control, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, n := residentPages(t, control); r < n/2 {
		t.Skipf("a file just written has %d of %d pages cached: this machine's page cache cannot be checked", r, n)
	}

	s := openTest(t, filepath.Join(dir, "store"), nil)
	c := mustCreate(t, s, "s", 1)
	data := paddedPayloads("p", 2000)
	for i := 0; i < len(data); i += 50 {
		mustAppend(t, c, data[i:i+50])
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	blobs, err := filepath.Glob(filepath.Join(dir, "store", "*.blob"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) == 0 {
		t.Fatal("the flush wrote no blob file")
	}
	for _, b := range blobs {
		r, n := residentPages(t, b)
		if n < 16 {
			t.Fatalf("%s has %d pages, too few to tell", b, n)
		}
		if r > n/4 {
			t.Errorf("%s: %d of its %d pages still cached after the flush", filepath.Base(b), r, n)
		}
	}
	// The records still read back, from the dropped files.
	got := dataOf(readAll(t, c))
	if len(got) != len(data) {
		t.Fatalf("read back %d records, want %d", len(got), len(data))
	}
	for i := range data {
		if !bytes.Equal(got[i], data[i]) {
			t.Fatalf("record %d reads back %q, want %q", i, got[i], data[i])
		}
	}
}
