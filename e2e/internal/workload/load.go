package workload

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/brook-streams/brook/pkg/client"
)

// LoadConfig configures a Load.
type LoadConfig struct {
	// Name prefixes the producer ids ("<name>-p<i>"); it must be unique
	// among the loads of one stream and hold no '#'.
	Name string
	// Publishers is the number of concurrent synchronous publishers
	// (default 4).
	Publishers int
	// Interval is the pause between two publishes of one publisher
	// (default 5ms), which keeps the load modest on a small machine.
	Interval time.Duration
	// Size is the payload size in bytes (default 64).
	Size int
}

// Load publishes to one stream from several publishers until stopped,
// recording every outcome in a Ledger. Each publisher publishes its
// sequence 0, 1, 2, ... with the client's producer id and sequence headers,
// so the owner suppresses a retried repeat within its window.
type Load struct {
	cfg    LoadConfig
	cl     *client.Client
	stream string
	led    *Ledger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	errs []error // ledger misuse; reported by Stop
}

// StartLoad starts the publishers. They run until Stop (or ctx ends).
func StartLoad(ctx context.Context, cl *client.Client, stream string, led *Ledger, cfg LoadConfig) *Load {
	if cfg.Publishers <= 0 {
		cfg.Publishers = 4
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Millisecond
	}
	if cfg.Size <= 0 {
		cfg.Size = 64
	}
	if cfg.Name == "" {
		cfg.Name = "load"
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cfg: cfg, cl: cl, stream: stream, led: led, cancel: cancel}
	for i := range cfg.Publishers {
		producer := cfg.Name + "-p" + strconv.Itoa(i)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.publisher(ctx, producer)
		}()
	}
	return l
}

// publisher publishes one producer's sequence until ctx ends.
func (l *Load) publisher(ctx context.Context, producer string) {
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		id := ID{Producer: producer, Seq: seq}
		data := Payload(id, l.cfg.Size)
		o := Outcome{ID: id, Data: data, Sent: time.Now()}
		pc, err := l.cl.Publish(ctx, l.stream, data, client.WithProducer(producer, seq))
		o.Done = time.Now()
		if err == nil {
			o.Confirmed, o.Confirm = true, pc
		} else {
			o.Err, o.Stopped = err, ctx.Err() != nil
		}
		if rerr := l.led.Record(o); rerr != nil {
			l.mu.Lock()
			l.errs = append(l.errs, rerr)
			l.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		pause := l.cfg.Interval
		if err != nil && !errors.Is(err, context.Canceled) && o.Done.Sub(o.Sent) < 50*time.Millisecond {
			// An immediate failure (a stream that waits, for instance):
			// do not spin on it.
			pause = max(pause, 50*time.Millisecond)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Stop stops the publishers and waits for them. Publishes in flight end
// with the context's error and count as not confirmed.
func (l *Load) Stop() error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		return fmt.Errorf("load %s: %w", l.cfg.Name, errors.Join(l.errs...))
	}
	return nil
}
