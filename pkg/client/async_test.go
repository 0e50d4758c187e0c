package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/brook-streams/brook/pkg/wire"
)

// heldOwner is a test owner that holds publishes until told to answer, so
// a test sees exactly how many are outstanding at once.
type heldOwner struct {
	t       *testing.T
	mu      sync.Mutex
	held    []*nats.Msg
	order   []string
	maxHeld int
	next    uint64
	changed chan struct{} // gets a token whenever a publish arrives
}

func newHeldOwner(t *testing.T, nc *nats.Conn, stream string) *heldOwner {
	o := &heldOwner{t: t, changed: make(chan struct{}, 1<<16)}
	subscribe(t, nc, wire.PublishSubject(stream), func(m *nats.Msg) {
		o.mu.Lock()
		o.held = append(o.held, m)
		o.order = append(o.order, string(m.Data))
		o.maxHeld = max(o.maxHeld, len(o.held))
		o.mu.Unlock()
		o.changed <- struct{}{}
	})
	return o
}

// waitHeld waits until n publishes are held.
func (o *heldOwner) waitHeld(ctx context.Context, n int) error {
	for {
		o.mu.Lock()
		got := len(o.held)
		o.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-o.changed:
		case <-ctx.Done():
			return fmt.Errorf("held %d of %d: %w", got, n, ctx.Err())
		}
	}
}

// release confirms every held publish.
func (o *heldOwner) release() int {
	o.mu.Lock()
	held := o.held
	o.held = nil
	o.mu.Unlock()
	for _, m := range held {
		o.mu.Lock()
		off := o.next
		o.next++
		o.mu.Unlock()
		respondJSON(o.t, m, wire.PublishConfirm{Offset: off, Copies: 2})
	}
	return len(held)
}

// The window bounds outstanding publishes: with Window publishes held by
// the owner, the next PublishAsync waits (here until its context ends);
// once they are confirmed, it goes through.
func TestAsyncWindowBlocksWhenFull(t *testing.T) {
	url := startNATS(t)
	owner := newHeldOwner(t, responderConn(t, url), "s")
	c := connectClient(t, url)
	p, err := c.NewAsyncPublisher("s", AsyncConfig{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	var futs []*Future
	for i := range 4 {
		f, err := p.PublishAsync(ctx, []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futs = append(futs, f)
	}
	if err := owner.waitHeld(ctx, 4); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.PublishAsync(short, []byte("5th")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("5th publish with a full window: err = %v, want to wait until the deadline", err)
	}
	if got := p.Outstanding(); got != 4 {
		t.Fatalf("outstanding = %d, want 4", got)
	}
	owner.release()
	for i, f := range futs {
		pc, err := f.Wait(ctx)
		if err != nil || pc.Offset != uint64(i) {
			t.Fatalf("future %d = %+v, %v; want offset %d", i, pc, err, i)
		}
	}
	f, err := p.PublishAsync(ctx, []byte("5th"))
	if err != nil {
		t.Fatalf("5th publish after release: %v", err)
	}
	if err := owner.waitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	owner.release()
	if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := p.PublishAsync(ctx, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: err = %v, want ErrClosed", err)
	}
}

// Many publishes through a small window: the owner never holds more than
// the window, the window fills, first attempts arrive in call order, and
// Close waits for every confirm.
func TestAsyncWindowRespectedUnderLoad(t *testing.T) {
	const window, total = 8, 200
	url := startNATS(t)
	owner := newHeldOwner(t, responderConn(t, url), "s")
	c := connectClient(t, url)
	var results atomic.Int32
	p, err := c.NewAsyncPublisher("s", AsyncConfig{Window: window, OnResult: func(f *Future) {
		if _, err := f.Result(); err == nil {
			results.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 20*time.Second)

	// The owner answers only when the window is full (or at the tail end),
	// so the bound is actually reached, and never exceeded.
	sent := make(chan struct{})
	go func() {
		released := 0
		for released < total {
			want := min(window, total-released)
			if err := owner.waitHeld(ctx, want); err != nil {
				t.Errorf("owner: %v", err)
				return
			}
			released += owner.release()
		}
		close(sent)
	}()
	for i := range total {
		if _, err := p.PublishAsync(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	<-sent
	if results.Load() != total {
		t.Fatalf("confirmed %d, want %d", results.Load(), total)
	}
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if owner.maxHeld != window {
		t.Fatalf("owner held at most %d at once, want exactly the window %d", owner.maxHeld, window)
	}
	for i, d := range owner.order {
		if d != strconv.Itoa(i) {
			t.Fatalf("publish %d arrived as %q: first attempts out of order", i, d)
		}
	}
}

// An async publish whose first attempt finds no owner is retried like a
// sync one, and an error that must not be retried settles the future.
func TestAsyncRetryAndFailure(t *testing.T) {
	url := startNATS(t)
	svc := responderConn(t, url)
	var once sync.Once
	subscribe(t, svc, wire.AdminSubject(wire.VerbStreamInfo), func(m *nats.Msg) {
		once.Do(func() {
			_, err := svc.Subscribe(wire.PublishSubject("s"), func(m *nats.Msg) {
				if string(m.Data) == "big" {
					respondError(t, m, wire.Errorf(wire.CodePayloadTooLarge, "too big"))
					return
				}
				respondJSON(t, m, wire.PublishConfirm{Offset: 1, Copies: 2})
			})
			if err == nil {
				err = svc.Flush()
			}
			if err != nil {
				t.Errorf("start owner: %v", err)
			}
		})
		respondJSON(t, m, wire.StreamInfo{Stream: "s", Status: wire.StatusRecovering})
	})
	c := connectClient(t, url)
	p, err := c.NewAsyncPublisher("s", AsyncConfig{Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	f, err := p.PublishAsync(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if pc, err := f.Wait(ctx); err != nil || pc.Offset != 1 {
		t.Fatalf("retried async publish = %+v, %v", pc, err)
	}
	f, err = p.PublishAsync(ctx, []byte("big"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Wait(ctx); wire.CodeOf(err) != wire.CodePayloadTooLarge {
		t.Fatalf("err = %v, want payload_too_large", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
