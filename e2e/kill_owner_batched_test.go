package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/client"
)

// TestKillOwnerBatched: SIGKILL the owner of a 3-copy majority_durable
// stream in the middle of batched publishing (issue 16): an async
// publisher with a window of 256 and four synchronous publishers on the
// same client, all with producer ids, their records gathered into publish
// batches (brook.s.<stream>.pubb). Batches in flight at the kill are
// retried record by record at the new owner, which rebuilt its duplicate
// window from its log.
//
// It catches: a batch confirmed before W copies hold all of its records
// (a confirmed record lost), a retried batch written twice (a record
// delivered at two offsets), a record of a batch confirmed at an offset
// that holds another record.
func TestKillOwnerBatched(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "kill-owner-batched"
	before := e.createStream(stream, 3)
	oldOwner, epoch := before.Assignment.Owner, before.Assignment.Epoch

	led := workload.NewLedger()
	al := startAsyncLoad(e, stream, "kb-async", led)
	defer al.stop(t)
	ld := e.load(stream, "kb-sync", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 3000, epoch)

	killedAt := time.Now()
	e.signal(e.host(oldOwner), syscall.SIGKILL)
	e.waitConfirms(led, 3000, epoch+1)
	after := e.waitServingAt(stream, epoch+1, oldOwner)
	e.logf("failover under batched publishing: %s -> %s at epoch %d", oldOwner, after.Assignment.Owner, after.Assignment.Epoch)

	al.stop(t)
	e.stopLoad(ld, led)
	rd := workload.NewReader(e.cl, stream, "kill-owner-batched-reader")
	rep := e.verify(stream, led, rd, workload.CheckConfig{})
	if rep.RetryCopies != 0 || rep.Lost != 0 {
		t.Fatalf("batched publishing across the kill: %d duplicates, %d lost; want 0 and 0", rep.RetryCopies, rep.Lost)
	}
	crossed := led.Count(func(o workload.Outcome) bool {
		return o.Confirmed && o.Confirm.Epoch == epoch+1 && o.Sent.Before(killedAt)
	})
	e.logf("%d records sent before the kill were confirmed by the new owner (retried across the failover)", crossed)
}

// asyncLoad publishes one producer's sequence through an AsyncPublisher
// (window 256) until stopped, recording every outcome in a ledger.
type asyncLoad struct {
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
	err     error
}

func startAsyncLoad(e *env, stream, producer string, led *workload.Ledger) *asyncLoad {
	e.t.Helper()
	p, err := e.cl.NewAsyncPublisher(stream, client.AsyncConfig{Window: 256})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	l := &asyncLoad{cancel: cancel, done: make(chan struct{})}
	type sent struct {
		o   workload.Outcome
		fut *client.Future
	}
	ch := make(chan sent, 512)
	go func() {
		defer close(ch)
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			id := workload.ID{Producer: producer, Seq: seq}
			data := workload.Payload(id, 64)
			o := workload.Outcome{ID: id, Data: data, Sent: time.Now()}
			fut, err := p.PublishAsync(ctx, data, client.WithProducer(producer, seq))
			if err != nil {
				return // the load stopped while the window was full: not sent
			}
			ch <- sent{o, fut}
		}
	}()
	go func() {
		defer close(l.done)
		for s := range ch {
			<-s.fut.Done()
			pc, err := s.fut.Result()
			s.o.Done = time.Now()
			if err == nil {
				s.o.Confirmed, s.o.Confirm = true, pc
			} else {
				s.o.Err = err
			}
			if rerr := led.Record(s.o); rerr != nil && l.err == nil {
				l.err = rerr
			}
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if cerr := p.Close(cctx); cerr != nil && l.err == nil {
			l.err = cerr
		}
	}()
	return l
}

// stop stops publishing and waits until every publish sent is settled.
func (l *asyncLoad) stop(t *testing.T) {
	l.stopped.Do(func() {
		l.cancel()
		<-l.done
		if l.err != nil {
			t.Error(l.err)
		}
	})
}
