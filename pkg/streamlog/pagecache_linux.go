package streamlog

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// dropCached asks the kernel to drop f's clean pages from the page cache
// (POSIX_FADV_DONTNEED). Dirty pages stay until written back.
func dropCached(f vfs.File) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.Fadvise(int(fd), 0, 0, unix.FADV_DONTNEED)
	}
}
