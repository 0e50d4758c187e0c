package e2e

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
	"github.com/brook-streams/brook/pkg/wire"
)

// orphans is how many records the owner appends alone.
const orphans = 20

// TestLongerTail: a copy comes back with a longer, unconfirmed tail. Both
// followers are killed; publishes to the owner are appended there but time
// out unconfirmed (W=2); the owner is killed; the followers come back and
// one is promoted below the owner's tail; new records are confirmed over
// the same offsets; then the old owner comes back. It must be cut back
// onto the new owner's history and catch up: its tails then match the new
// owner's, and its own copy, read back directly, holds the new owner's
// records at every offset. A reader following the stream all along was
// never handed one of the orphaned records.
//
// It catches: an owner that confirms or serves records fewer than W copies
// hold, a returning copy that keeps its own suffix (diverged bytes under a
// matching tail), a cut in the wrong place, and a reader that sees a
// record that is later cut.
func TestLongerTail(t *testing.T) {
	e := newEnv(t, opts{})
	const stream = "longer-tail"
	before := e.createStream(stream, 3)
	epoch, owner := before.Assignment.Epoch, before.Assignment.Owner
	f1, f2 := before.Assignment.Followers[0], before.Assignment.Followers[1]

	led := workload.NewLedger()
	// A reader follows the stream throughout, through its own consumer.
	rd := workload.NewReader(e.cl, stream, "longer-tail-follower")
	rctx, stopReader := context.WithCancel(e.ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		rd.Run(rctx)
	}()
	defer func() { stopReader(); <-readerDone }()

	ld := e.load(stream, "lt1", led)
	e.waitConfirms(led, 200, epoch)
	e.stopLoad(ld, led)
	e.waitCaughtUp(stream, f1)
	base := e.waitCaughtUp(stream, f2)
	ownTail, _ := copyTail(base, owner)

	// The owner alone: its appends cannot be confirmed.
	e.signal(e.host(f1), syscall.SIGKILL)
	e.signal(e.host(f2), syscall.SIGKILL)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := range orphans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := workload.ID{Producer: "orphan", Seq: uint64(i)}
			o := workload.Outcome{ID: id, Data: workload.Payload(id, 64), Sent: time.Now()}
			pc, err := e.cl.Publish(e.ctx, stream, o.Data)
			o.Done = time.Now()
			if err == nil {
				o.Confirmed, o.Confirm = true, pc
			} else {
				o.Err = err
			}
			mu.Lock()
			defer mu.Unlock()
			if rerr := led.Record(o); rerr != nil {
				bad = append(bad, rerr.Error())
			}
			switch we := wireError(err); {
			case err == nil:
				bad = append(bad, fmt.Sprintf("%s confirmed at offset %d with copies=%d although both followers are dead", id, pc.Offset, pc.Copies))
			case !isConfirmTimeout(err):
				bad = append(bad, fmt.Sprintf("%s: %v, want confirm_timeout", id, err))
			case we.Copies == nil || *we.Copies != 1:
				bad = append(bad, fmt.Sprintf("%s: confirm_timeout with copies %v, want 1 (the owner)", id, we.Copies))
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("publishes to an owner without followers:\n%v", bad)
	}
	e.waitInfo(stream, owner+" holding the orphaned records", func(i wire.StreamInfo) (bool, error) {
		ct, _ := copyTail(i, owner)
		// At least: a reply delayed past the client's request timeout
		// makes it send the record again.
		return ct.RecordTail >= ownTail.RecordTail+orphans, nil
	})
	e.logf("%s holds %d unconfirmed records past %d", owner, orphans, ownTail.RecordTail)

	// The owner dies; the followers come back; one of them is promoted
	// below the owner's tail.
	e.signal(e.host(owner), syscall.SIGKILL)
	e.restart(e.host(f1))
	e.restart(e.host(f2))
	after := e.waitServingAt(stream, epoch+1, owner)
	start := after.Starts[len(after.Starts)-1]
	if start.RecordTail != ownTail.RecordTail {
		t.Fatalf("promoted %s at %+v; the followers held %d", after.Assignment.Owner, start, ownTail.RecordTail)
	}
	e.logf("%s owns at epoch %d from %d", after.Assignment.Owner, epoch+1, start.RecordTail)

	ld = e.load(stream, "lt2", led)
	defer func() { _ = ld.Stop() }()
	e.waitConfirms(led, 100, epoch+1)
	e.restart(e.host(owner))
	e.waitFollower(stream, owner, epoch+1)
	e.waitConfirms(led, 100, epoch+1)
	e.stopLoad(ld, led)
	caught := e.waitCaughtUp(stream, owner)
	newTail, _ := copyTail(caught, caught.Assignment.Owner)
	oldTail, _ := copyTail(caught, owner)
	e.logf("%s caught up: record tail %d cursor tail %d, owner %s at %d/%d", owner, oldTail.RecordTail,
		oldTail.CursorTail, newTail.Node, newTail.RecordTail, newTail.CursorTail)

	stopReader()
	<-readerDone
	e.verify(stream, led, rd, workload.CheckConfig{})
	d := rd.Delivered()
	for off, data := range d.Data {
		if id, err := workload.ParsePayload(data); err == nil && id.Producer == "orphan" {
			t.Fatalf("a reader was handed the unconfirmed %s at offset %d", id, off)
		}
	}
	e.checkCopyContent(stream, owner, d)
}
