package streamlog

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// writtenOnceFS is the operating system's file system for a store, except
// that a blob file or table Pebble writes (a flush's or a compaction's
// output) leaves the page cache when Pebble closes it, after Pebble
// synced it: its pages go back to the kernel at once, to hold the next
// file's writes.
//
// Why: a flush writes every record a second time (the WAL wrote it
// first), into a new blob file, and a new file's pages come from free
// memory. On a virtual machine whose free memory is handed back to its
// host (this kind reports free pages in 8 MiB blocks), a page the kernel
// has not used lately costs the host's fault when first written: a
// program writing 16 MiB files paid 1.8 ns a byte once the page cache
// grew into such memory, 0.13-0.25 with each file dropped after its sync.
// In one profile at window 256 the hosts' file writes were 7.6% of the
// machine, most of it a flush's blob files; in one with the files
// dropped, 2.7% (docs/benchmarks.md, "Session 58", where the rate did
// not move beyond the machine's spread). WAL files are left alone: Pebble
// recycles them, so once a store has run a while it writes its WAL over
// pages it wrote before (a fresh store's first WAL files are new).
//
// What it costs: a read of a dropped file goes to the device. A store
// reads records back from its memtables while they are young (an owner
// serves its followers from the records it just wrote), and its tables'
// blocks through Pebble's block cache (blockCacheSize); a reader
// catching up a 1,000,000-record stream, one run each, was not clearly
// slower (-7% to +26% by reader setting). Files Pebble opens for reading
// and the WAL are passed through untouched.
type writtenOnceFS struct{ vfs.FS }

// Create opens a file for writing; a blob file or a table gets a handle
// whose Close drops its pages.
func (fs writtenOnceFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err == nil && (strings.HasSuffix(name, ".blob") || strings.HasSuffix(name, ".sst")) {
		return writtenOnceFile{f}, nil
	}
	return f, err
}

// writtenOnceFile drops its pages from the page cache when it is closed.
type writtenOnceFile struct{ vfs.File }

// Close drops the file's cached pages (dropCached: clean ones only, so
// Pebble's sync before Close is what makes them go), then closes it. A
// failed drop is not the file's failure: the pages stay cached.
func (f writtenOnceFile) Close() error {
	dropCached(f.File)
	return f.File.Close()
}
