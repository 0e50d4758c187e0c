package streamlog

import (
	"encoding/binary"
	"fmt"
)

// Records queued for a group commit are written (offsets, digests and
// values assigned, in the copy's queue) before they are durable. An owner
// replicates them from there while its own fsync runs, so that its fsync
// and a follower's overlap instead of running one after the other. They
// are served from the queued requests themselves (copyImpl.written), which
// stay immutable once assigned; Pebble is not read for them, since its
// batch becomes visible only after the synced commit.

// dropWrittenLocked removes r from the copy's written requests once its
// group commit ended (durable, or failed with the store).
func (c *copyImpl) dropWrittenLocked(r *request) {
	for i, w := range c.written {
		if w == r {
			c.written = append(c.written[:i], c.written[i+1:]...)
			if len(c.written) == 0 {
				c.written = nil
			}
			return
		}
	}
}

// writtenAtLocked returns the entry of the written, not yet durable record
// at off, if the copy's queue holds it. Call with c.mu held.
func (c *copyImpl) writtenAtLocked(off uint64) ([]byte, bool) {
	for _, r := range c.written {
		first := r.recEnd - uint64(len(r.vals))
		if off >= first && off < r.recEnd {
			return r.vals[off-first], true
		}
	}
	return nil, false
}

func (c *copyImpl) readWritten(from uint64, maxRecords, maxBytes int, below uint64) ([]Record, error) {
	for {
		out, err := c.read(from, maxRecords, maxBytes, below)
		if err != nil {
			return nil, err
		}
		next := from + uint64(len(out))
		bytes := 0
		for _, r := range out {
			bytes += len(r.Data)
		}
		if (maxRecords > 0 && len(out) >= maxRecords) || next >= below {
			return out, nil
		}
		c.mu.Lock()
		if next < c.tail {
			// The durable tail moved past what the read saw: those
			// records left the queue. Whatever was read is returned; an
			// empty read is done again.
			c.mu.Unlock()
			if len(out) > 0 {
				return out, nil
			}
			continue
		}
		for off := next; off < min(below, c.next); off++ {
			e, ok := c.writtenAtLocked(off)
			if !ok {
				break
			}
			rm, data, err := decodeRecordValue(e)
			if err != nil {
				c.mu.Unlock()
				return nil, fmt.Errorf("streamlog: read %s: written record %d: %w", c.name, off, err)
			}
			if len(out) > 0 && maxBytes > 0 && bytes+len(data) > maxBytes {
				break
			}
			out = append(out, Record{Offset: off, TimeNS: rm.timeNS, Data: data})
			bytes += len(data)
			if maxRecords > 0 && len(out) >= maxRecords {
				break
			}
		}
		c.mu.Unlock()
		return out, nil
	}
}

// writtenDigestLocked is the running digest below off for a durable tail <
// off <= the written tail: the digest stored with the queued record at
// off-1. Call with c.mu held.
func (c *copyImpl) writtenDigestLocked(off uint64) (uint64, bool) {
	if off == c.next {
		return c.nextDigest, true
	}
	e, ok := c.writtenAtLocked(off - 1)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(e[0:8]), true
}
