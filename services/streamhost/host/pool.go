package host

import (
	"sync"
	"time"
)

// pool runs the host's short jobs (request goroutines of every owner, seal
// and apply goroutines) on goroutines that outlive them: a job goes to an
// idle worker if one waits, else a new worker runs it and then waits up to
// workerIdle for the next. A goroutine started per job grew its stack
// again for every job (runtime.copystack was a tenth of a host's CPU in a
// 10,000-stream failover), and per-owner idle workers did not carry over
// between the thousands of owners a failover wakes one request each; the
// pool's workers keep their grown stacks for whichever job comes.
//
// The pool bounds nothing by itself: every job is started by a caller that
// bounds its own (a budget slot, a tracker, a semaphore) and counts it in
// its own WaitGroup, so the pool's workers number at most the jobs running
// at once plus those idle, and an idle one ends after workerIdle or at
// close.
type pool struct {
	work chan func()
	done chan struct{}  // closed by close: idle workers end
	wg   sync.WaitGroup // workers
	mu   struct {
		sync.Mutex
		closed bool
		// started counts the workers started (tests).
		started int64
	}
}

// workerIdle is how long a worker of the pool waits for the next job
// before it ends.
const workerIdle = 2 * time.Second

func newPool() *pool {
	return &pool{work: make(chan func()), done: make(chan struct{})}
}

// Go runs f on an idle worker, or on a new one. It never blocks. After
// close, or on a nil pool (hosts built in tests), f runs on a goroutine
// of its own.
func (p *pool) Go(f func()) {
	if p == nil {
		go f()
		return
	}
	select {
	case p.work <- f:
		return
	default:
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		go f()
		return
	}
	p.mu.started++
	p.wg.Add(1)
	p.mu.Unlock()
	go p.worker(f)
}

// worker runs f, then the jobs handed to it until none came for workerIdle
// or the pool closed.
func (p *pool) worker(f func()) {
	defer p.wg.Done()
	f()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case f := <-p.work:
			f()
			t.Reset(workerIdle)
		case <-t.C:
			return
		case <-p.done:
			return
		}
	}
}

// close ends the idle workers and waits for every worker, each of which
// finishes its job first. Jobs started after close run on goroutines of
// their own, which close does not wait for (their callers do).
func (p *pool) close() {
	p.mu.Lock()
	if !p.mu.closed {
		p.mu.closed = true
		close(p.done)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// workers returns how many workers the pool has started (tests).
func (p *pool) workers() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.started
}
