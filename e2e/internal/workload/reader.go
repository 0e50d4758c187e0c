package workload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/brook-streams/brook/pkg/client"
	"github.com/brook-streams/brook/pkg/wire"
)

// maxProblems bounds what a Reader keeps of what it saw go wrong.
const maxProblems = 50

// Reader reads a stream through one durable cursor and remembers what each
// offset held when it was delivered. It may be closed and reopened (which
// commits the cursor, and resumes from the committed position), across
// failovers too; a record delivered again must hold the same bytes, or a
// record a reader already saw was cut from the stream.
//
// Methods may be called from one goroutine at a time, except Delivered,
// Position and Problems, which may be called at any time.
type Reader struct {
	cl     *client.Client
	stream string
	cursor string
	cn     *client.Consumer

	mu         sync.Mutex
	data       map[uint64][]byte
	started    bool
	next       uint64 // one past the highest offset delivered
	deliveries int
	errors     int
	problems   []string
}

// NewReader returns a reader of stream through cursor; it reads nothing
// until asked.
func NewReader(cl *client.Client, stream, cursor string) *Reader {
	return &Reader{cl: cl, stream: stream, cursor: cursor, data: make(map[uint64][]byte)}
}

func (r *Reader) open() error {
	if r.cn != nil {
		return nil
	}
	cn, err := r.cl.NewConsumer(r.stream, client.ConsumerConfig{
		Cursor:         r.cursor,
		MaxRecords:     512,
		Wait:           200 * time.Millisecond,
		CommitInterval: 300 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("reader %s/%s: %w", r.stream, r.cursor, err)
	}
	r.cn = cn
	return nil
}

// readOne reads one record and remembers it.
func (r *Reader) readOne(ctx context.Context) error {
	if err := r.open(); err != nil {
		return err
	}
	rec, err := r.cn.Next(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries++
	if prev, ok := r.data[rec.Offset]; ok {
		if string(prev) != string(rec.Data) {
			r.problemLocked("offset %d was delivered as %.40q and later as %.40q: a record a reader saw was cut or replaced", rec.Offset, prev, rec.Data)
		}
		return nil
	}
	if r.started && rec.Offset > r.next {
		r.problemLocked("offsets %d to %d were skipped: the reader got %d after %d", r.next, rec.Offset-1, rec.Offset, r.next-1)
	}
	r.data[rec.Offset] = append([]byte(nil), rec.Data...)
	if !r.started || rec.Offset+1 > r.next {
		r.next = rec.Offset + 1
	}
	r.started = true
	return nil
}

func (r *Reader) problemLocked(format string, args ...any) {
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// ReadTo reads until every offset below end was delivered, or ctx ends. A
// read that fails (the client gave up across a long failover) reopens the
// consumer from the committed cursor and goes on.
func (r *Reader) ReadTo(ctx context.Context, end uint64) error {
	var last error
	for r.Position() < end {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reader %s/%s at %d of %d: %w (last read error: %v)", r.stream, r.cursor, r.Position(), end, err, last)
		}
		if err := r.readOne(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			last = err
			r.mu.Lock()
			r.errors++
			r.mu.Unlock()
			r.drop()
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// Run reads until ctx ends, as a reader that follows the stream would;
// read errors reopen the consumer.
func (r *Reader) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := r.readOne(ctx); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.errors++
			r.mu.Unlock()
			r.drop()
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

// drop forgets the consumer without committing (its owner may be gone).
func (r *Reader) drop() { r.cn = nil }

// Reopen commits the cursor and closes the consumer; the next read opens a
// new one, which resumes from the committed position.
func (r *Reader) Reopen(ctx context.Context) error {
	if r.cn == nil {
		return nil
	}
	cn := r.cn
	r.cn = nil
	if err := cn.Close(ctx); err != nil {
		return fmt.Errorf("reader %s/%s: close: %w", r.stream, r.cursor, err)
	}
	return nil
}

// Position is one past the highest offset delivered (0 before any).
func (r *Reader) Position() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Delivered returns what the reader has seen so far.
func (r *Reader) Delivered() Delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Delivered{
		Data:       maps.Clone(r.data),
		Problems:   append([]string(nil), r.problems...),
		Deliveries: r.deliveries,
		Errors:     r.errors,
	}
}

// Delivered is what a reader was handed.
type Delivered struct {
	// Data is what each offset held when it was first delivered.
	Data map[uint64][]byte
	// Problems are inconsistencies seen while reading (a re-delivered
	// offset with other bytes, skipped offsets).
	Problems []string
	// Deliveries counts records handed out, re-deliveries included;
	// Errors counts reads that failed and reopened the consumer.
	Deliveries, Errors int
}

// ConfirmedEnd asks the stream's owner for its confirmed watermark: a reader
// can read every offset below it. It retries across a failover like any
// fetch.
func ConfirmedEnd(ctx context.Context, cl *client.Client, stream string) (uint64, error) {
	b, err := cl.Fetch(ctx, stream, wire.FetchRequest{Start: "latest", MaxRecords: 1})
	if err != nil {
		return 0, fmt.Errorf("confirmed end of %s: %w", stream, err)
	}
	return b.Confirmed, nil
}

// ReadAll reads to the end of what the ledger confirmed and of the owner's
// confirmed watermark, whichever is further: after a load stopped, that is
// everything a reader can be handed.
func (r *Reader) ReadAll(ctx context.Context, led *Ledger) error {
	wm, err := ConfirmedEnd(ctx, r.cl, r.stream)
	if err != nil {
		return err
	}
	end := wm
	for _, o := range led.Outcomes() {
		if o.Confirmed && o.Confirm.Offset+1 > end {
			end = o.Confirm.Offset + 1
		}
	}
	if err := r.ReadTo(ctx, end); err != nil {
		return errors.Join(err, fmt.Errorf("reading to %d: the owner's confirmed watermark was %d when the read began", end, wm))
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
