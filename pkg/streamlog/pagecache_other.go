//go:build !linux

package streamlog

import "github.com/cockroachdb/pebble/v2/vfs"

// dropCached does nothing where the page cache is not asked (see
// pagecache_linux.go).
func dropCached(vfs.File) {}
