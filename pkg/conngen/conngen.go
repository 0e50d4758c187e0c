// Package conngen gives each NATS connection of a process a context that
// ends when the connection is replaced by a reconnect. A request in
// flight on the old connection is lost with it (the server it went
// through may be gone, and with it the request or its answer); a caller
// that derives its wait from Current gives such a request up at once and
// asks again, instead of waiting out its timeout.
package conngen

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Generation is safe for concurrent use.
type Generation struct {
	// cur is read on every request (Current) without a lock; mu
	// serializes Replaced.
	cur    atomic.Pointer[generation]
	mu     sync.Mutex
	cancel context.CancelFunc
}

// generation is one connection's context and start.
type generation struct {
	ctx   context.Context
	began time.Time // when it replaced the previous one (zero: the first)
}

// New returns the generation of the first connection.
func New() *Generation {
	g := &Generation{}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.cur.Store(&generation{ctx: ctx})
	return g
}

// Current returns the context of the current connection: it is done once
// the connection has been replaced.
func (g *Generation) Current() context.Context { return g.cur.Load().ctx }

// Replaced ends the current connection's context and starts the next;
// call it from the connection's reconnect handler.
func (g *Generation) Replaced() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancel()
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.cur.Store(&generation{ctx: ctx, began: time.Now()})
}

// Began returns when the current connection replaced the previous one,
// or the zero time for the first connection.
func (g *Generation) Began() time.Time { return g.cur.Load().began }
