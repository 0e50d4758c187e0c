package e2e

import (
	"fmt"
	"strconv"
	"time"

	"github.com/brook-streams/brook/e2e/internal/workload"
)

// chaosPublishers is how many publishers the chaos load runs.
const chaosPublishers = 4

// outcomes follows the chaos load's ledger as it grows, reading each
// outcome once: every publisher publishes its sequence 0, 1, 2, ... and
// records each outcome before its next publish, so the outcomes not read
// yet are found by id (Ledger.Lookup) from where each publisher was last.
//
// The suites' waitConfirms (Ledger.WaitCount) scans the whole ledger again
// on every record, and Ledger.Stats copies it: over a 30-minute run (300,000
// outcomes, 30 ms a scan here) that kept the test process busy for seconds
// an episode, and the three nats-servers run in that process. So TestChaos
// waits and counts with this instead.
type outcomes struct {
	led   *workload.Ledger
	names []string
	next  []uint64
	// What was read so far.
	published, confirmed int
}

func newOutcomes(led *workload.Ledger, load string) *outcomes {
	o := &outcomes{led: led, next: make([]uint64, chaosPublishers)}
	for i := range chaosPublishers {
		// workload.StartLoad names its producers so.
		o.names = append(o.names, load+"-p"+strconv.Itoa(i))
	}
	return o
}

// read passes each outcome recorded since the last read to fn.
func (o *outcomes) read(fn func(workload.Outcome)) {
	for i, name := range o.names {
		for {
			out, ok := o.led.Lookup(workload.ID{Producer: name, Seq: o.next[i]})
			if !ok {
				break
			}
			o.next[i]++
			o.published++
			if out.Confirmed {
				o.confirmed++
			}
			fn(out)
		}
	}
}

// waitConfirms waits for n more confirms (counted from now) at minEpoch or
// later, as env.waitConfirms does.
func (o *outcomes) waitConfirms(e *env, n int, minEpoch uint64) {
	e.t.Helper()
	since := time.Now()
	got := 0
	count := func(out workload.Outcome) {
		if out.Confirmed && out.Confirm.Epoch >= minEpoch && out.Done.After(since) {
			got++
		}
	}
	for deadline := since.Add(waitLong); ; {
		o.read(count)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d confirms at epoch >= %d: %d in %v; %v", n, minEpoch, got, waitLong, o)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-e.ctx.Done():
			t.Stop()
			e.t.Fatal(e.ctx.Err())
		case <-t.C:
		}
	}
}

func (o *outcomes) String() string {
	return fmt.Sprintf("%d published, %d confirmed", o.published, o.confirmed)
}
