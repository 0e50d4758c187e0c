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
	"time"
)

// Generation is safe for concurrent use.
type Generation struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	began  time.Time // when the current connection replaced the last (zero: the first)
}

// New returns the generation of the first connection.
func New() *Generation {
	g := &Generation{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// Current returns the context of the current connection: it is done once
// the connection has been replaced.
func (g *Generation) Current() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx
}

// Replaced ends the current connection's context and starts the next;
// call it from the connection's reconnect handler.
func (g *Generation) Replaced() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancel()
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.began = time.Now()
}

// Began returns when the current connection replaced the previous one,
// or the zero time for the first connection.
func (g *Generation) Began() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.began
}
