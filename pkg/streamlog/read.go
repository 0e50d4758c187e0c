package streamlog

import (
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

func (c *copyImpl) read(from uint64, maxRecords, maxBytes int, below uint64) ([]Record, error) {
	var out []Record
	_, err := c.readFunc(from, maxRecords, maxBytes, below, func(off uint64, timeNS int64, data []byte) error {
		out = append(out, Record{Offset: off, TimeNS: timeNS, Data: slices.Clone(data)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *copyImpl) readFunc(from uint64, maxRecords, maxBytes int, below uint64, visit func(uint64, int64, []byte) error) (n int, err error) {
	if err := c.s.enter(); err != nil {
		return 0, err
	}
	defer c.s.leave()
	c.mu.Lock()
	head, tail, deleted := c.meta.Head, c.tail, c.deleted
	c.mu.Unlock()
	if deleted {
		return 0, fmt.Errorf("streamlog: read %s: %w", c.name, ErrDeleted)
	}
	if from < head {
		return 0, fmt.Errorf("streamlog: read %s from %d: head is %d: %w", c.name, from, head, ErrBelowHead)
	}
	// Only durable records are read: the tail moves only after a commit.
	end := min(below, tail)
	if from >= end {
		return 0, nil
	}
	ri, err := newRecordIter(c.s.db, c.id)
	if err != nil {
		return 0, fmt.Errorf("streamlog: read %s: %w", c.name, err)
	}
	defer func() {
		if cerr := ri.close(); cerr != nil && err == nil {
			err = fmt.Errorf("streamlog: read %s: %w", c.name, cerr)
		}
	}()
	bytes := 0
	for ok := ri.seekGE(from); ok && ri.off < end; ok = ri.next() {
		if ri.off != from+uint64(n) {
			if n == 0 {
				// Retention (or a cut) removed it after the head was read.
				return 0, fmt.Errorf("streamlog: read %s from %d: record is gone: %w", c.name, from, ErrBelowHead)
			}
			break
		}
		data := ri.data
		if n > 0 && maxBytes > 0 && bytes+len(data) > maxBytes {
			break
		}
		if err := visit(ri.off, ri.meta.timeNS, data); err != nil {
			return n, err
		}
		n++
		bytes += len(data)
		if (maxRecords > 0 && n >= maxRecords) || ri.off+1 >= end {
			// Not a step further: what lies past the read is not its
			// business, even a corrupt batch.
			break
		}
	}
	return n, nil
}

func (c *copyImpl) readCursorEvents(from uint64, max int, below uint64) (_ []CursorEvent, err error) {
	if err := c.s.enter(); err != nil {
		return nil, err
	}
	defer c.s.leave()
	c.mu.Lock()
	start, written, deleted := c.meta.CursorStart, c.cWritten, c.deleted
	c.mu.Unlock()
	if deleted {
		return nil, fmt.Errorf("streamlog: read cursor events of %s: %w", c.name, ErrDeleted)
	}
	if from < start {
		return nil, fmt.Errorf("streamlog: read cursor events of %s from %d: the log starts at %d: %w", c.name, from, start, ErrBelowHead)
	}
	end := min(below, written)
	if from >= end {
		return nil, nil
	}
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(c.id, from), UpperBound: eventKey(c.id, end)})
	if err != nil {
		return nil, fmt.Errorf("streamlog: read cursor events of %s: %w", c.name, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("streamlog: read cursor events of %s: %w", c.name, cerr)
		}
	}()
	var out []CursorEvent
	for it.First(); it.Valid(); it.Next() {
		off, err := keyOffset(it.Key())
		if err != nil {
			return nil, err
		}
		if off != from+uint64(len(out)) {
			break
		}
		cursor, pos, err := decodeEvent(it.Value())
		if err != nil {
			return nil, fmt.Errorf("streamlog: read cursor events of %s: event %d: %w", c.name, off, err)
		}
		out = append(out, CursorEvent{Offset: off, Cursor: cursor, Position: pos})
		if max > 0 && len(out) >= max {
			break
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("streamlog: read cursor events of %s: %w", c.name, err)
	}
	return out, nil
}
