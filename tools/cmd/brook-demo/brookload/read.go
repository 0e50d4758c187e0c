package brookload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/frame"
	"github.com/brook-streams/brook/pkg/wire"
)

// Tail asks the stream's owner for its record tail and confirmed watermark.
func Tail(ctx context.Context, c *client.Client, stream string) (tail, confirmed uint64, err error) {
	b, err := c.Fetch(ctx, stream, wire.FetchRequest{Start: "latest", MaxRecords: 1})
	if err != nil {
		return 0, 0, fmt.Errorf("tail of %s: %w", stream, err)
	}
	return b.Tail, b.Confirmed, nil
}

// SettledTail waits until the owner has confirmed everything it holds and
// returns that tail: once publishing has stopped, the end of what a reader
// must see. If the watermark does not reach the tail within patience, the
// tail is returned with an error saying how far the watermark got.
func SettledTail(ctx context.Context, c *client.Client, stream string, patience time.Duration) (uint64, error) {
	deadline := time.Now().Add(patience)
	for {
		tail, confirmed, err := Tail(ctx, c, stream)
		if err != nil {
			return 0, err
		}
		if confirmed >= tail {
			return tail, nil
		}
		if time.Now().After(deadline) {
			return tail, fmt.Errorf("tail of %s: watermark %d still below tail %d after %v", stream, confirmed, tail, patience)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("tail of %s: %w", stream, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReadAll delivers every record of stream from its retained head up to the
// owner's tail as of the first fetch, in offset order, by explicit-offset
// fetches (no cursor). It waits for the confirmed watermark to pass that
// tail, within ctx.
func ReadAll(ctx context.Context, c *client.Client, stream string, fn func(frame.Record)) error {
	b, err := c.Fetch(ctx, stream, wire.FetchRequest{Start: "earliest", MaxRecords: 10000, WaitMS: 200})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	end := b.Tail
	next := b.Head
	for {
		for _, r := range b.Records {
			if r.Offset < next {
				continue // never deliver an offset twice
			}
			if r.Offset >= end {
				return nil
			}
			fn(r)
			next = r.Offset + 1
		}
		next = max(next, b.Next)
		if next >= end {
			return nil
		}
		if b, err = c.Fetch(ctx, stream, wire.FetchRequest{Start: "offset", Offset: next, MaxRecords: 10000, WaitMS: 500}); err != nil {
			return fmt.Errorf("read %s from %d: %w", stream, next, err)
		}
	}
}

// Follow reads stream through the durable cursor from its committed
// position (a new cursor starts at the head) and delivers every record in
// offset order until ctx ends, committing as it goes. It returns nil when
// ctx ends.
func Follow(ctx context.Context, c *client.Client, stream, cursor string, fn func(frame.Record)) error {
	cn, err := c.NewConsumer(stream, client.ConsumerConfig{Cursor: cursor, MaxRecords: 2000, Wait: 500 * time.Millisecond})
	if err != nil {
		return fmt.Errorf("follow %s: %w", stream, err)
	}
	for {
		r, err := cn.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				_ = cn.Close(cctx)
				return nil
			}
			return fmt.Errorf("follow %s: %w", stream, err)
		}
		fn(r)
	}
}

// ReadCursor reads stream through the durable cursor from its committed
// position until it has delivered every offset below end, then commits and
// closes the cursor. It returns how many records it delivered.
func ReadCursor(ctx context.Context, c *client.Client, stream, cursor string, end uint64, fn func(frame.Record)) (int, error) {
	cn, err := c.NewConsumer(stream, client.ConsumerConfig{Cursor: cursor, MaxRecords: 5000, Wait: 500 * time.Millisecond})
	if err != nil {
		return 0, fmt.Errorf("read %s with cursor %s: %w", stream, cursor, err)
	}
	n := 0
	for end > 0 {
		r, err := cn.Next(ctx)
		if err != nil {
			return n, fmt.Errorf("read %s with cursor %s at %d of %d: %w", stream, cursor, cn.Position(), end, err)
		}
		if r.Offset >= end {
			break
		}
		fn(r)
		n++
		if r.Offset+1 >= end {
			break
		}
	}
	if err := cn.Close(ctx); err != nil && !errors.Is(err, client.ErrClosed) {
		return n, fmt.Errorf("read %s with cursor %s: %w", stream, cursor, err)
	}
	return n, nil
}
