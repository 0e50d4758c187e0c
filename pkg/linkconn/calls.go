package linkconn

import "sync"

// ClientFetches is how many fetches a client sends on one client link
// connection at once (more go over the bus): the host's queue of replies
// to a client holds this many fetch replies at their largest.
const ClientFetches = 2

// Calls matches the answers read from a connection to the requests
// waiting for them, by the id each request was sent with (a hosts' link
// request's frame id; a client link fetch's reply subject). Its zero value
// is ready, and it is safe for concurrent use: requests wait on their
// own goroutines, answers come from the connection's reader.
type Calls[T any] struct {
	mu struct {
		sync.Mutex
		next    uint64
		pending map[uint64]chan T
	}
}

// Add registers a new request: its id, the channel its answer comes on
// (buffered, so that Answer never blocks), and end, which forgets the
// request and which the caller defers: an answer after it is dropped.
func (c *Calls[T]) Add() (id uint64, answer <-chan T, end func()) {
	ch := make(chan T, 1)
	c.mu.Lock()
	if c.mu.pending == nil {
		c.mu.pending = map[uint64]chan T{}
	}
	c.mu.next++
	id = c.mu.next
	c.mu.pending[id] = ch
	c.mu.Unlock()
	return id, ch, func() {
		c.mu.Lock()
		delete(c.mu.pending, id)
		c.mu.Unlock()
	}
}

// Answer hands v to request id, once: false if no request waits for it
// (it ended, was answered already, or never was).
func (c *Calls[T]) Answer(id uint64, v T) bool {
	c.mu.Lock()
	ch, ok := c.mu.pending[id]
	delete(c.mu.pending, id)
	c.mu.Unlock()
	if ok {
		ch <- v
	}
	return ok
}
